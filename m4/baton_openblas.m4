# baton_openblas.m4: BATON_OPENBLAS checks that OpenBLAS is installed and records the shared object
# that src/cpu/blas.c opens at run time (BATON_OPENBLAS_SONAME). baton does not link OpenBLAS
# directly: it loads it after choosing kernels for the running CPU (OPENBLAS_CORETYPE), which must
# happen before OpenBLAS initialises. --with-openblas-soname overrides the file name.
AC_DEFUN([BATON_OPENBLAS], [
  AC_ARG_WITH([openblas-soname],
    [AS_HELP_STRING([--with-openblas-soname=NAME],
      [OpenBLAS shared object opened at run time @<:@libopenblas.so.0@:>@])],
    [baton_openblas_lib="$withval"], [baton_openblas_lib=libopenblas.so.0])
  AC_CHECK_LIB([openblas], [cblas_sgemm], [baton_have_openblas=yes], [baton_have_openblas=no])
  AS_IF([test "x$baton_have_openblas" != xyes],
    [AC_MSG_WARN([OpenBLAS not found (install libopenblas-dev): baton will fall back to its own slow GEMM])
     baton_openblas_lib="$baton_openblas_lib (not found at configure time)"])
  AC_DEFINE_UNQUOTED([BATON_OPENBLAS_SONAME], ["${baton_openblas_lib%% *}"],
    [OpenBLAS shared object that src/cpu/blas.c opens])
])
