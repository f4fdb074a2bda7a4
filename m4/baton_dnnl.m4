# baton_dnnl.m4: BATON_DNNL looks for oneDNN (Debian's libdnnl-dev, 2.6), which runs the CPU's
# bf16 matrix products on AMX or AVX512-BF16 (src/cpu/gemm_bf16.c). oneDNN threads through OpenMP,
# so libgomp is linked too (baton sets OpenMP's per-thread count for each call). Without oneDNN
# baton builds and `precision: bf16` on a CPU rounds operands and multiplies them in f32 (the same
# products, the reference path). --with-dnnl requires it, --without-dnnl builds without it.
# Defines BATON_HAVE_DNNL and substitutes DNNL_LIBS.
AC_DEFUN([BATON_DNNL], [
  AC_ARG_WITH([dnnl],
    [AS_HELP_STRING([--without-dnnl], [build without oneDNN (bf16 on the CPU then computes in f32)])],
    [], [with_dnnl=check])
  baton_have_dnnl=no
  DNNL_LIBS=
  AS_IF([test "x$with_dnnl" != xno],
    [baton_save_LIBS=$LIBS
     AC_CHECK_HEADER([oneapi/dnnl/dnnl.h],
       [AC_CHECK_LIB([dnnl], [dnnl_matmul_desc_init],
         [AC_CHECK_LIB([gomp], [omp_set_num_threads],
           [baton_have_dnnl=yes; DNNL_LIBS="-ldnnl -lgomp"], [], [-ldnnl])])])
     LIBS=$baton_save_LIBS
     AS_IF([test "x$baton_have_dnnl" != xyes],
       [AS_IF([test "x$with_dnnl" = xyes],
          [AC_MSG_ERROR([--with-dnnl: oneDNN (libdnnl-dev) with its OpenMP runtime is needed])],
          [AC_MSG_WARN([oneDNN not found: bf16 on the CPU will compute in f32; install libdnnl-dev (scripts/install-deps.sh)])])])])
  AS_IF([test "x$baton_have_dnnl" = xyes],
    [AC_DEFINE([BATON_HAVE_DNNL], [1], [oneDNN runs bf16 matrix products on the CPU])])
  AC_SUBST([DNNL_LIBS])
])
