# Cross-compiling for 64-bit Arm Linux from an x86-64 Debian host (docs/kernels.md, "Arm"):
#   apt-get install crossbuild-essential-arm64 qemu-user   (and the -dev packages as :arm64, after
#   dpkg --add-architecture arm64)
#   cmake -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The test programs then run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), so ctest works as on a
# native build.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: the :arm64 libraries are in /usr/lib/aarch64-linux-gnu, found through this.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# -cpu max: every extension qemu emulates (dot product, i8mm, SVE), so each kernel level can be tested. No
# -L /usr/aarch64-linux-gnu: its C library (the cross compiler's) is older than the :arm64 one the -dev
# packages bring, and a program whose loader comes from one and libc from the other hangs in its first
# pthread_create; without -L both come from /lib/aarch64-linux-gnu.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;max)
