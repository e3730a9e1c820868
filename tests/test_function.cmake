# mtp_add_test(), shared by the full build (tests/CMakeLists.txt) and MTP_CORE_ONLY (the root CMakeLists.txt).
#
# The tests' own code compiles at -Og in optimized builds and at -O0 under the sanitizers: that halves their
# compile time against -O3 (and takes 35-45% off -O1 under ASan), which is most of CI's time, while the run time
# of the tests goes to the libraries they call, which keep the build type's level. A test target whose own code
# computes references at size (the kernels' canonical sums, the quantizers' hand checks) passes OPTIMIZED to keep
# the build type's level.
#
# mtp_add_test(NAME [OPTIMIZED] SOURCES... LIBS lib...): one GoogleTest executable registered with CTest.
function(mtp_add_test name)
  cmake_parse_arguments(T "OPTIMIZED" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    MTP_SOURCE_DIR="${PROJECT_SOURCE_DIR}" MTP_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT T_OPTIMIZED)
    if(MTP_SANITIZE OR MTP_FUZZ)
      target_compile_options(${name} PRIVATE -O0)
    elseif(NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
      target_compile_options(${name} PRIVATE -Og)
    endif()
  endif()
  # Set either way: the sanitizer and fuzzing builds turn unity on for every target (root CMakeLists.txt).
  set_target_properties(${name} PROPERTIES UNITY_BUILD ${MTP_UNITY_TESTS} UNITY_BUILD_BATCH_SIZE 8)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()
