/* sq-blas-core: calls sq_cpu_blas_reexec (runtime/cpu_matmul.h) as a tool's main does, then
 * prints OpenBLAS's kernel name and OPENBLAS_CORETYPE, for the cpu-matmul suite. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/cpu_matmul.h"

char *openblas_get_corename(void);   /* OpenBLAS's cblas.h; not in GSL's header */

int main(int argc, char **argv)
{
    (void)argc;
    sq_cpu_blas_reexec(argv);
    const char *env = getenv("OPENBLAS_CORETYPE");
    printf("%s %s\n", openblas_get_corename(), env ? env : "-");
    return 0;
}
