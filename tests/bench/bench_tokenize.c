/* bench-tokenize: encoding speed of libsequoia/text/tokenizer.h against the JavaScript
 * reference, on one core (issue 25; figures in docs/tokenizer.md, "Checked against").
 *
 *   bench-tokenize [--mb N] [--cache DIR] [--no-node]
 *
 * The text: the strings of tests/tokenizer/strings.jsonl (many scripts, emoji, whitespace,
 * digits, code, documents of a few KB) in turn, each a document, until N MB (default 4). Each
 * document is encoded alone without special tokens, after a warm-up pass over the first 500.
 * The models: the real vocabularies of tests/tokenizer/fetch.sh in DIR (default
 * $SEQUOIA_TOKREF_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/sequoia-tokref), else only the
 * shipped models' byte tokenizer (data/models/target). The process pins itself to one CPU
 * before it starts node (tests/tokenizer/bench.mjs) on the same documents, so both sides run
 * on one core; the table gives MB/s (10^6 bytes of UTF-8 text per second of CPU time, user +
 * system, so that other load on the machine does not count) of both, the ids each produced
 * (the same counts when both agree), and the CPU model. Not a test: nothing is asserted. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "libsequoia/text/tokenizer.h"

#ifndef SQ_SOURCE_DIR
#define SQ_SOURCE_DIR "."
#endif

/* CPU time of this process: on a shared machine the wall clock also counts the time other
 * processes held the core (bench.mjs measures node's the same way, process.cpuUsage) */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    if (b) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    return b;
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown CPU");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (fp && fgets(line, sizeof line, fp))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    if (fp)
        fclose(fp);
}

typedef struct doc {
    char  *text;
    size_t len;
} doc;

int main(int argc, char **argv)
{
    double mb = 4.0;
    const char *cache = getenv("SEQUOIA_TOKREF_DIR");
    int node = 1;
    char cbuf[4096];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc)
            mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
            cache = argv[++i];
        else if (!strcmp(argv[i], "--no-node"))
            node = 0;
        else {
            fprintf(stderr, "usage: bench-tokenize [--mb N] [--cache DIR] [--no-node]\n");
            return 64;
        }
    }
    if (!cache || !*cache) {
        const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
        snprintf(cbuf, sizeof cbuf, "%s%s/sequoia-tokref", x && *x ? x : h ? h : "/tmp",
                 x && *x ? "" : "/.cache");
        cache = cbuf;
    }
    /* one core for us and for node (it inherits the mask) */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    sched_setaffinity(0, sizeof one, &one);

    /* the documents */
    size_t slen;
    char *strings = slurp(SQ_SOURCE_DIR "/tests/tokenizer/strings.jsonl", &slen);
    if (!strings) {
        fprintf(stderr, "bench-tokenize: %s/tests/tokenizer/strings.jsonl: cannot read\n",
                SQ_SOURCE_DIR);
        return 66;
    }
    doc *base = NULL;
    size_t nb = 0;
    for (char *l = strtok(strings, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const cJSON *t = cJSON_GetObjectItem(j, "text");
        if (cJSON_IsString(t) && t->valuestring[0]) {
            base = realloc(base, (nb + 1) * sizeof *base);
            base[nb].len = strlen(t->valuestring);
            base[nb++].text = strdup(t->valuestring);
        }
        cJSON_Delete(j);
    }
    size_t want = (size_t)(mb * 1e6), total = 0, nd = 0, cap = 0;
    doc *docs = NULL;
    for (size_t i = 0; total < want; i++) {
        if (nd == cap) {
            cap = cap ? 2 * cap : 1024;
            docs = realloc(docs, cap * sizeof *docs);
        }
        docs[nd++] = base[i % nb];
        total += base[i % nb].len;
    }
    char tmpl[] = "/tmp/bench-tokenize-XXXXXX";
    int fd = mkstemp(tmpl);
    FILE *df = fd >= 0 ? fdopen(fd, "w") : NULL;
    for (size_t i = 0; df && i < nd; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", docs[i].text);
        char *s = cJSON_PrintUnformatted(o);
        fprintf(df, "%s\n", s);
        free(s);
        cJSON_Delete(o);
    }
    if (df)
        fclose(df);

    const char *models[] = {"qwen3", "llama3_1", "llama2", "gemma3"};
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("bench-tokenize: %.2f MB of mixed text in %zu documents; one core of %s\n",
           (double)total / 1e6, nd, cpu);
    char nodecmd[8192] = "";
    const char *name[5];
    double c_mbs[5], js_mbs[5];
    size_t c_ids[5];
    long js_ids[5];
    int rows = 0;
    int have_cache = 0;
    for (int m = 0; m < 5; m++) {
        char path[4200];
        if (m < 4)
            snprintf(path, sizeof path, "%s/models/%s/tokenizer.json", cache, models[m]);
        else if (!have_cache)
            snprintf(path, sizeof path, "%s/data/models/target/tokenizer.json", SQ_SOURCE_DIR);
        else
            break;
        if (access(path, R_OK) != 0)
            continue;
        sq_tokenizer *tok;
        sq_error err = {0};
        if (sq_tokenizer_load(path, &tok, &err)) {
            fprintf(stderr, "bench-tokenize: %s\n", err.msg);
            continue;
        }
        if (m < 4) {
            have_cache = 1;
            strncat(nodecmd, " ", sizeof nodecmd - strlen(nodecmd) - 1);
            strncat(nodecmd, models[m], sizeof nodecmd - strlen(nodecmd) - 1);
        }
        int32_t *ids;
        size_t n, nids = 0;
        for (size_t i = 0; i < nd && i < 500; i++)
            if (!sq_tokenizer_encode(tok, docs[i].text, docs[i].len, 0, &ids, &n, &err))
                free(ids);
        double t0 = now();
        for (size_t i = 0; i < nd; i++)
            if (!sq_tokenizer_encode(tok, docs[i].text, docs[i].len, 0, &ids, &n, &err)) {
                nids += n;
                free(ids);
            }
        double s = now() - t0;
        name[rows] = m < 4 ? models[m] : "bytes";
        c_mbs[rows] = (double)total / 1e6 / s;
        c_ids[rows] = nids;
        js_mbs[rows] = -1;
        js_ids[rows++] = -1;
        sq_tokenizer_free(tok);
    }
    if (node && have_cache) {
        char cmd[12000];
        snprintf(cmd, sizeof cmd, "node '%s/tests/tokenizer/bench.mjs' '%s' '%s'%s",
                 SQ_SOURCE_DIR, cache, tmpl, nodecmd);
        FILE *p = popen(cmd, "r");
        char line[512];
        while (p && fgets(line, sizeof line, p)) {
            char model[64];
            double bytes, secs;
            long nids;
            if (sscanf(line, "%63s %lf %lf %ld", model, &bytes, &secs, &nids) == 4)
                for (int r = 0; r < rows; r++)
                    if (!strcmp(name[r], model)) {
                        js_mbs[r] = bytes / 1e6 / secs;
                        js_ids[r] = nids;
                    }
        }
        if (!p || pclose(p) != 0)
            printf("(node failed or is missing: no JavaScript figures)\n");
    } else if (!have_cache) {
        printf("(no vocabularies in %s: run tests/tokenizer/fetch.sh for the real models and "
               "the JavaScript reference)\n", cache);
    }
    printf("%-10s %10s %10s %10s %10s %8s\n", "model", "C ids", "JS ids", "C MB/s", "JS MB/s",
           "C/JS");
    for (int r = 0; r < rows; r++) {
        if (js_mbs[r] > 0)
            printf("%-10s %10zu %10ld %10.2f %10.2f %7.1fx\n", name[r], c_ids[r], js_ids[r],
                   c_mbs[r], js_mbs[r], c_mbs[r] / js_mbs[r]);
        else
            printf("%-10s %10zu %10s %10.2f %10s %8s\n", name[r], c_ids[r], "-", c_mbs[r], "-",
                   "-");
    }
    unlink(tmpl);
    for (size_t i = 0; i < nb; i++)
        free(base[i].text);
    free(base);
    free(docs);
    free(strings);
    return 0;
}
