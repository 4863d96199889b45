/* Fuzz harness: the safetensors header (runtime/safetensors.h).
 * Byte 0 bit 0 set: the rest is the whole file. Otherwise bytes 1-2 give a data-buffer size
 * (little-endian, 0..65535) and the rest is the header JSON: the harness writes the u64 length,
 * the header and that many data bytes, so the fuzzer works on the JSON.
 * Oracle: every tensor of a file that opens lies inside the mapping (each byte is read, and
 * F32/F16/BF16 tensors are converted), and lookups by name find each tensor. */
#include <stdlib.h>
#include <string.h>

#include "runtime/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const char *path;
    if (data[0] & 1) {
        path = fz_scratch_file("model.safetensors", data + 1, size - 1);
    } else {
        size_t dsize = (size_t)data[1] | ((size_t)data[2] << 8);
        size_t hlen = size - 3;
        size_t total = 8 + hlen + dsize;
        uint8_t *buf = calloc(total, 1);
        if (!buf)
            abort();
        for (int i = 0; i < 8; i++)
            buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        memcpy(buf + 8, data + 3, hlen);
        for (size_t i = 0; i < dsize; i++)
            buf[8 + hlen + i] = (uint8_t)(i * 31u + 7u);
        path = fz_scratch_file("model.safetensors", buf, total);
        free(buf);
    }
    sq_st_file *f = NULL;
    sq_error err = {0};
    if (sq_st_open(path, &f, &err) == SQ_OK) {
        unsigned sum = 0;
        for (int i = 0; i < f->n_tensors; i++) {
            const sq_st_tensor *t = &f->tensors[i];
            if (t->nbytes != t->numel * sq_st_dtype_size(t->dtype))
                abort();
            const unsigned char *b = t->data;
            for (uint64_t k = 0; k < t->nbytes; k++)
                sum += b[k];
            if (t->numel <= 65536 &&
                (t->dtype == SQ_ST_F32 || t->dtype == SQ_ST_F16 || t->dtype == SQ_ST_BF16)) {
                float *dst = malloc(t->numel ? t->numel * sizeof(float) : 1);
                if (!dst)
                    abort();
                if (sq_st_to_f32(t->dtype, t->data, dst, t->numel) != 0)
                    abort();
                free(dst);
            }
            if (sq_st_find(f, t->name) != t)
                abort();
        }
        (void)sq_st_metadata(f, "format");
        if (sum == 0xFFFFFFFFu)  /* keep the reads */
            f->n_tensors += 0;
        sq_st_close(f);
    } else if (!err.msg[0]) {
        abort();
    }
    return 0;
}
