# baton_cuda.m4: BATON_CUDA finds the CUDA toolkit, cuBLAS and cuDNN (none of them Debian packages
# here, and none ship .pc files). --with-cuda=DIR picks the toolkit (default /usr/local/cuda),
# --without-cuda builds a CPU-only baton, --with-cuda-arch="80 90" picks the GPU targets (SASS for
# each plus PTX for the newest). --enable-cuda-emulator builds the CUDA backend for the emulator
# of tests/cuda_emu (docs/gpu.md): the CUDA headers only (no nvcc, libraries or GPU needed),
# kernels compiled by $CXX, cuDNN off, the runtime and cuBLAS stand-ins linked in; sets
# enable_cuda_emulator and defines BATON_CUDA_EMULATOR. Sets have_cuda, have_cublas, have_cudnn, NVCC, NVCCFLAGS,
# CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS and CUDA_ARCH_LIST, and defines BATON_HAVE_CUDA.
AC_DEFUN([BATON_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit location @<:@/usr/local/cuda@:>@; --without-cuda for a CPU-only build])],
    [], [with_cuda=check])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [compute capabilities to build for @<:@"80 90"@:>@])],
    [CUDA_ARCH_LIST="$withval"], [CUDA_ARCH_LIST="80 90"])
  AC_ARG_ENABLE([cuda-emulator],
    [AS_HELP_STRING([--enable-cuda-emulator], [test build: run the CUDA backend and kernels on the CPU under tests/cuda_emu (needs the CUDA headers, not a GPU)])],
    [], [enable_cuda_emulator=no])
  have_cuda=no
  have_cublas=no
  have_cudnn=no
  CUDA_HOME=
  AS_CASE(["$with_cuda"],
    [no], [],
    [yes|check], [CUDA_HOME=/usr/local/cuda],
    [CUDA_HOME="$with_cuda"])
  AS_IF([test "x$enable_cuda_emulator" = xyes], [
    AS_IF([test -z "$CUDA_HOME"], [AC_MSG_ERROR([--enable-cuda-emulator needs the CUDA headers: drop --without-cuda])])
    baton_save_CPPFLAGS="$CPPFLAGS"
    CUDA_CPPFLAGS="-I$CUDA_HOME/include"
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    AC_CHECK_HEADER([cuda_runtime.h], [have_cuda=yes])
    AC_CHECK_HEADER([cublas_v2.h], [have_cublas=yes])
    CPPFLAGS="$baton_save_CPPFLAGS"
    AS_IF([test "x$have_cuda" != xyes || test "x$have_cublas" != xyes],
      [AC_MSG_ERROR([--enable-cuda-emulator: cuda_runtime.h and cublas_v2.h not found under $CUDA_HOME/include])])
    NVCC=:
    NVCCFLAGS=
    CUDA_LDFLAGS=
    CUDA_LIBS=
    CUDA_ARCH_LIST="(emulated)"
    AC_DEFINE([BATON_HAVE_CUDA], [1], [the CUDA backend is built])
    AC_DEFINE([BATON_CUDA_EMULATOR], [1], [the CUDA backend runs on the CPU emulator of tests/cuda_emu])
  ], [test -n "$CUDA_HOME"], [
    AC_PATH_PROG([NVCC], [nvcc], [no], [$CUDA_HOME/bin])
    AS_IF([test "x$NVCC" != xno], [
      baton_save_CPPFLAGS="$CPPFLAGS"
      baton_save_LDFLAGS="$LDFLAGS"
      baton_save_LIBS="$LIBS"
      CUDA_CPPFLAGS="-I$CUDA_HOME/include"
      CUDA_LDFLAGS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64"
      CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
      LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
      AC_CHECK_HEADER([cuda_runtime.h],
        [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [have_cuda=yes])])
      AS_IF([test "x$have_cuda" = xyes], [
        AC_CHECK_HEADER([cublas_v2.h],
          [AC_CHECK_LIB([cublas], [cublasCreate_v2], [have_cublas=yes])])
        AC_CHECK_HEADER([cudnn.h],
          [AC_CHECK_LIB([cudnn], [cudnnCreate], [have_cudnn=yes])])
      ])
      CPPFLAGS="$baton_save_CPPFLAGS"
      LDFLAGS="$baton_save_LDFLAGS"
      LIBS="$baton_save_LIBS"
    ])
  ])
  AS_IF([test "x$enable_cuda_emulator" = xyes], [], [
  AS_IF([test "x$with_cuda" != xno && test "x$with_cuda" != xcheck && test "x$have_cuda" != xyes],
    [AC_MSG_ERROR([--with-cuda was given but no usable CUDA toolkit was found under $CUDA_HOME])])
  AS_IF([test "x$have_cuda" = xyes && test "x$have_cublas" != xyes],
    [AC_MSG_WARN([CUDA found without cuBLAS: building CPU-only]); have_cuda=no])
  AS_IF([test "x$have_cuda" = xyes], [
    NVCCFLAGS="-O3 -std=c++17 --expt-relaxed-constexpr"
    baton_last_arch=
    for baton_arch in $CUDA_ARCH_LIST; do
      NVCCFLAGS="$NVCCFLAGS -gencode arch=compute_$baton_arch,code=sm_$baton_arch"
      baton_last_arch=$baton_arch
    done
    AS_IF([test -n "$baton_last_arch"],
      [NVCCFLAGS="$NVCCFLAGS -gencode arch=compute_$baton_last_arch,code=compute_$baton_last_arch"])
    CUDA_LIBS="-lcublas -lcudart"
    AS_IF([test "x$have_cudnn" = xyes], [CUDA_LIBS="-lcudnn $CUDA_LIBS"
      AC_DEFINE([BATON_HAVE_CUDNN], [1], [cuDNN is available])])
    AC_DEFINE([BATON_HAVE_CUDA], [1], [the CUDA backend is built])
  ], [
    CUDA_HOME=
    CUDA_ARCH_LIST="(none)"
  ])
  ])
  AC_SUBST([NVCC])
  AC_SUBST([NVCCFLAGS])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([CUDA_ARCH_LIST])
])
