# Cross-compiles Orchard for arm64 Linux with Debian's aarch64-linux-gnu toolchain and the arm64
# builds of its libraries from Debian's multiarch packages (scripts/install-arm64.sh installs
# both). Executables run under qemu-user, so ctest and gtest_discover_tests work on an x86 host.
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Multiarch: the arm64 libraries live in /usr/lib/aarch64-linux-gnu beside the host's, and their
# headers in /usr/include, so the search root stays / and CMAKE_LIBRARY_ARCHITECTURE picks the
# arm64 folder. Programs (node, npm, git) are the host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config must read the arm64 .pc files only, or it would hand back the host's libraries.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# -cpu max emulates every arm64 feature qemu knows (FEAT_DotProd included), so the dotprod
# kernels are the ones tested, as on an Apple M-series chip. No -L: the arm64 loader and libraries
# are installed by multiarch where the binaries look for them.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu max)
