/* Suite 'readme' (issue 14): every command of README.md runs as written.
 *
 * The commands are taken from README.md's ```sh code blocks as it is when the test runs (lines
 * joined at a trailing backslash, comments after '#' dropped, split at '&&'). Each runs with
 * `sh -c`, exactly as written, in a scratch folder that mirrors the source tree (a symlink for
 * every top-level entry, and build -> the build being tested), so that outputs such as
 * plan.json land there and not in the source tree. Three kinds are not run, each with a reason
 * checked instead:
 *   ./setup.sh            sets up and builds the tree this test runs in (checked executable);
 *   meson test, .ci/run   run this very suite (recursion; .ci/run checked executable);
 *   examples/ scripts     minutes long: run by readme::example_scripts_run_as_written when
 *                         SQ_README_EXAMPLES=1 (with PROMPTS=1 NEW_TOKENS=8), else checked to
 *                         exist and parse (bash -n).
 * A command must exit 0. */
#include <criterion/criterion.h>

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testutil.h"

#define MAX_CMDS 256

static char *cmds[MAX_CMDS];
static int n_cmds;

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Drops a comment: '#' at the start or after a blank, outside quotes. */
static void drop_comment(char *s)
{
    char q = 0;
    for (char *p = s; *p; p++) {
        if (q) {
            if (*p == q)
                q = 0;
        } else if (*p == '\'' || *p == '"') {
            q = *p;
        } else if (*p == '#' && (p == s || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

static void add_line(char *line)
{
    drop_comment(line);
    /* split at "&&" */
    char *p = line;
    for (;;) {
        char *amp = strstr(p, "&&");
        if (amp)
            *amp = '\0';
        char *c = trim(p);
        if (*c && n_cmds < MAX_CMDS)
            cmds[n_cmds++] = strdup(c);
        if (!amp)
            break;
        p = amp + 2;
    }
}

/* The commands of every ```sh (or ```bash, ```shell) block of `doc` (README.md), or of its
 * first block only. */
static void read_commands_of(const char *doc, int first_only)
{
    char *path = tu_source_path(doc);
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "%s", path);
    char line[8192], joined[16384];
    int in_sh = 0;
    joined[0] = '\0';
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "```", 3) == 0) {
            const char *info = trim(line + 3);
            if (in_sh && first_only)
                break;
            in_sh = !in_sh && (!strcmp(info, "sh") || !strcmp(info, "bash") ||
                               !strcmp(info, "shell") || !strcmp(info, "console"));
            continue;
        }
        if (!in_sh)
            continue;
        char *l = line;
        if (l[0] == '$' && l[1] == ' ')
            l += 2;    /* a prompt */
        size_t n = strlen(l);
        int cont = n > 0 && l[n - 1] == '\\';
        if (cont)
            l[n - 1] = '\0';
        strncat(joined, l, sizeof joined - strlen(joined) - 2);
        if (cont) {
            strcat(joined, " ");
            continue;
        }
        add_line(joined);
        joined[0] = '\0';
    }
    fclose(fp);
    free(path);
}

static void read_commands(void)
{
    read_commands_of("README.md", 0);
}

/* A scratch folder that looks like the source tree, with build -> the build under test. */
static char *mirror(void)
{
    char *dir = tu_tmpdir(), *src = tu_source_path(".");
    const char *build = getenv("SQ_BUILD_ROOT");
    cr_assert_not_null(build, "SQ_BUILD_ROOT is set by meson");
    DIR *d = opendir(src);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strncmp(e->d_name, "build", 5))
            continue;
        char *from = tu_path(src, e->d_name), *to = tu_path(dir, e->d_name);
        char *abs = realpath(from, NULL);
        cr_assert_eq(symlink(abs ? abs : from, to), 0, "%s", to);
        free(abs);
        free(from);
        free(to);
    }
    closedir(d);
    char *b = tu_path(dir, "build"), *absb = realpath(build, NULL);
    cr_assert_eq(symlink(absb ? absb : build, b), 0);
    free(absb);
    free(b);
    free(src);
    return dir;
}

/* The first word after leading VAR=value assignments. */
static const char *program(const char *cmd)
{
    static char word[512];
    const char *p = cmd;
    for (;;) {
        size_t n = strcspn(p, " \t");
        if (n < sizeof word) {
            memcpy(word, p, n);
            word[n] = '\0';
        } else {
            word[0] = '\0';
        }
        if (!strchr(word, '=') || word[0] == '=')
            return word;
        p += n;
        while (*p == ' ' || *p == '\t')
            p++;
    }
}

static void run_readme(int examples)
{
    read_commands();
    cr_assert(n_cmds > 0, "README.md has no ```sh block");
    char *dir = mirror();
    int ran = 0;
    for (int i = 0; i < n_cmds; i++) {
        const char *cmd = cmds[i], *prog = program(cmd);
        if (!strcmp(prog, "./setup.sh") || !strcmp(prog, ".ci/run")) {
            char *p = tu_source_path(prog);
            cr_assert_eq(access(p, X_OK), 0, "README: `%s`: %s is not executable", cmd, p);
            free(p);
            continue;
        }
        if (!strcmp(prog, "meson"))
            continue;   /* meson test: this suite itself */
        size_t len = strlen(cmd) + strlen(dir) + 256;
        char *script = malloc(len);
        if (!strncmp(prog, "examples/", 9)) {
            if (examples)
                snprintf(script, len, "cd '%s' && PROMPTS=1 NEW_TOKENS=8 %s", dir, cmd);
            else if (strstr(prog, ".sh"))
                snprintf(script, len, "cd '%s' && bash -n %s", dir, prog);
            else
                snprintf(script, len, "cd '%s' && test -x %s", dir, prog);
        } else if (examples) {
            free(script);
            continue;
        } else {
            snprintf(script, len, "cd '%s' && %s", dir, cmd);
        }
        char *argv[] = {"/bin/sh", "-c", script, NULL};
        char *so = NULL, *se = NULL;
        int st = tu_run(argv, &so, &se);
        cr_assert_eq(st, 0, "README: `%s` exits %d:\n%s%s", cmd, st, so, se);
        ran++;
        free(so);
        free(se);
        free(script);
    }
    if (!examples)
        cr_assert(ran > 0, "no README command was run");
    cr_log_info("%d README commands run, %d checked", ran, n_cmds - ran);
    tu_rmtree(dir);
}

Test(readme, every_command_runs_as_written, .timeout = 280)
{
    run_readme(0);
}

Test(readme, example_scripts_run_as_written, .timeout = 280)
{
    const char *on = getenv("SQ_README_EXAMPLES");
    if (!on || strcmp(on, "1"))
        cr_skip_test("set SQ_README_EXAMPLES=1 to run the README's example scripts (minutes)");
    run_readme(1);
}

/* docs/engines.md's first examples (issue 27) run as written after the README's quick start
 * (its `-o plan.json` command), with the build's planner on PATH as the page says. */
Test(readme, engines_md_examples_run_after_the_quick_start, .timeout = 120)
{
    read_commands();
    const char *quick = NULL;
    for (int i = 0; i < n_cmds && !quick; i++)
        if (strstr(cmds[i], "sequoia-plan") && strstr(cmds[i], "-o plan.json"))
            quick = cmds[i];
    cr_assert_not_null(quick, "README.md has no quick start writing plan.json");
    const int first = n_cmds;
    read_commands_of("docs/engines.md", 1);
    cr_assert(n_cmds > first, "docs/engines.md has no ```sh block");
    char *dir = mirror();
    for (int i = first - 1; i < n_cmds; i++) {
        const char *cmd = i < first ? quick : cmds[i];
        size_t len = strlen(cmd) + 2 * strlen(dir) + 64;
        char *script = malloc(len);
        snprintf(script, len, "cd '%s' && PATH='%s/build/planner':$PATH %s", dir, dir, cmd);
        char *argv[] = {"/bin/sh", "-c", script, NULL};
        char *so = NULL, *se = NULL;
        int st = tu_run(argv, &so, &se);
        cr_assert_eq(st, 0, "%s: `%s` exits %d:\n%s%s", i < first ? "README" : "docs/engines.md",
                     cmd, st, so, se);
        free(so);
        free(se);
        free(script);
    }
    tu_rmtree(dir);
}
