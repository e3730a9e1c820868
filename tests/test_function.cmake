# mtp_add_test(), shared by the full build (tests/CMakeLists.txt) and MTP_CORE_ONLY (the root CMakeLists.txt).
# mtp_add_test(NAME SOURCES... LIBS lib...): one GoogleTest executable registered with CTest.
function(mtp_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    MTP_SOURCE_DIR="${PROJECT_SOURCE_DIR}" MTP_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()
