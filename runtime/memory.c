/* The weights' bytes and the memory check (runtime/memory.h). */
#include "runtime/memory.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

double sq_weights_bytes(const sq_model_config *c)
{
    return (double)sq_model_config_params(c) * sizeof(float);
}

double sq_memory_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

int sq_memory_check(double need, sq_error *err, const char *advice, const char *fmt, ...)
{
    const double have = sq_memory_total();
    if (!(have > 0 && need > 0.8 * have))
        return SQ_OK;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sq_error_set(err, SQ_EUSAGE, "%s, more than 80%% of this machine's %.2f GiB; %s", what,
                        have / 1073741824.0, advice);
}
