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
# libpq: Debian 12's libpq-dev cannot be installed for two architectures at once, so
# scripts/install-arm64.sh installs the arm64 library alone (libpq5:arm64). The build links it
# through a pkg-config file and a libpq.so link of its own, with the host libpq-dev's headers
# (architecture-neutral: pg_config_ext.h says `long int` for int64, which LP64 arm64 shares).
# The file goes where pkg_check_modules looks under CMAKE_PREFIX_PATH, not into PKG_CONFIG_LIBDIR:
# the environment is the process's, and each try_compile reads this file again with a binary
# folder of its own.
set(arm64_libpq /usr/lib/aarch64-linux-gnu/libpq.so.5)
if(EXISTS ${arm64_libpq} AND EXISTS /usr/include/postgresql/libpq-fe.h
   AND NOT EXISTS /usr/lib/aarch64-linux-gnu/pkgconfig/libpq.pc)
  set(arm64_pq_prefix ${CMAKE_BINARY_DIR}/arm64-libpq)
  file(MAKE_DIRECTORY ${arm64_pq_prefix}/lib/pkgconfig)
  file(CREATE_LINK ${arm64_libpq} ${arm64_pq_prefix}/lib/libpq.so SYMBOLIC)
  file(WRITE ${arm64_pq_prefix}/lib/pkgconfig/libpq.pc
    "Name: libpq\nDescription: PostgreSQL libpq library (arm64, Debian's libpq5:arm64)\nVersion: 5\n"
    "Cflags: -I/usr/include/postgresql\nLibs: -L${arm64_pq_prefix}/lib -lpq\n")
  list(APPEND CMAKE_PREFIX_PATH ${arm64_pq_prefix})
endif()
set(ENV{PKG_CONFIG_PATH} "")

# -cpu max emulates every arm64 feature qemu knows (FEAT_DotProd included), so the dotprod
# kernels are the ones tested, as on an Apple M-series chip. No -L: the arm64 loader and libraries
# are installed by multiarch where the binaries look for them.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu max)
