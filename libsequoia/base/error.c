#include "libsequoia/base/error.h"

#include <stdarg.h>
#include <string.h>

int sq_error_set(sq_error *err, int status, const char *fmt, ...)
{
    if (err && err->status == SQ_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

int sq_error_oom(sq_error *err, const char *what)
{
    return sq_error_set(err, SQ_ESOFTWARE, "out of memory while allocating %s", what);
}

const char *sq_status_name(int status)
{
    switch (status) {
    case SQ_OK:         return "success";
    case SQ_EFAIL:      return "check failed";
    case SQ_EUSAGE:     return "usage error or request past a limit";
    case SQ_EDATA:      return "invalid input data";
    case SQ_ENOINPUT:   return "input file missing or unreadable";
    case SQ_EUNAVAILABLE: return "a library it needs is unavailable";
    case SQ_ESOFTWARE:  return "internal error";
    case SQ_ECANTCREAT: return "cannot create output";
    case SQ_EIO:        return "I/O error";
    default:            return "unknown";
    }
}
