/* A fake NVRTC for tests without a GPU: "compiles" a program with the host C compiler.
 *
 * Built as libnvrtc.so beside the fake libcuda.so.1 (fake_cuda.c). A program's source is C code
 * for the fake driver (kernels as in fake_kernels.c); compiling writes the source and its
 * headers into a directory, runs `cc -shared` with every -D and -I option (--use_fast_math
 * defines KF_FAST_MATH, --maxrregcount=N defines KF_MAXRREG=N, other options are accepted and
 * ignored) and hands back the image the fake driver loads, "KFFAKE <library>\n" (with a
 * ".target" line for PTX). Outputs are content-addressed under $KFFAKE_NVRTC_DIR (default
 * /tmp/kffake-nvrtc-<uid>), so the same program and options give the same image bytes.
 * A name expression is lowered by replacing '<' and ',' with '_' and dropping every other
 * character that is not alphanumeric or '_' (scale<double> -> scale_double).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
typedef int nvrtcResult;
enum { OK = 0, INVALID_INPUT = 3, INVALID_PROGRAM = 4, COMPILATION = 6, NO_LOWERED = 9 };
typedef struct {
  char *src, *name, **headers, **includes, **exprs, **lowered;
  int nheaders, nexpr;
  char image[4200], ptx[4300], *log;
  int compiled;
} prog_t;

static char *sdup(const char *s) { return strdup(s ? s : ""); }

nvrtcResult nvrtcVersion(int *major, int *minor) { *major = 12, *minor = 9; return OK; }
const char *nvrtcGetErrorString(nvrtcResult r) { return r ? "NVRTC_ERROR_FAKE" : "NVRTC_SUCCESS"; }

nvrtcResult nvrtcCreateProgram(prog_t **p, const char *src, const char *name, int nh,
                               const char *const *headers, const char *const *includes) {
  if (!p || !src) return INVALID_INPUT;
  prog_t *g = calloc(1, sizeof *g);
  g->src = sdup(src), g->name = sdup(name);
  g->nheaders = nh;
  g->headers = calloc((size_t)nh + 1, sizeof *g->headers);
  g->includes = calloc((size_t)nh + 1, sizeof *g->includes);
  for (int i = 0; i < nh; i++) g->headers[i] = sdup(headers[i]), g->includes[i] = sdup(includes[i]);
  *p = g;
  return OK;
}

nvrtcResult nvrtcDestroyProgram(prog_t **p) {
  if (!p || !*p) return INVALID_PROGRAM;
  free((*p)->src), free((*p)->log), free(*p);
  *p = NULL;
  return OK;
}

static void lower(const char *expr, char *out, size_t cap) {
  size_t n = 0;
  for (const char *c = expr; *c && n + 1 < cap; c++) {
    if (*c == '<' || *c == ',') out[n++] = '_';
    else if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
             *c == '_')
      out[n++] = *c;
  }
  out[n] = 0;
}

nvrtcResult nvrtcAddNameExpression(prog_t *p, const char *expr) {
  if (!p || !expr) return INVALID_INPUT;
  p->exprs = realloc(p->exprs, (size_t)(p->nexpr + 1) * sizeof *p->exprs);
  p->lowered = realloc(p->lowered, (size_t)(p->nexpr + 1) * sizeof *p->lowered);
  char low[512];
  lower(expr, low, sizeof low);
  p->exprs[p->nexpr] = sdup(expr), p->lowered[p->nexpr++] = sdup(low);
  return OK;
}

nvrtcResult nvrtcGetLoweredName(prog_t *p, const char *expr, const char **lowered) {
  for (int i = 0; p && expr && i < p->nexpr; i++)
    if (!strcmp(p->exprs[i], expr)) { *lowered = p->lowered[i]; return OK; }
  return NO_LOWERED;
}

static uint64_t fnv(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
  return (h ^ 0xff) * 0x100000001b3ULL;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return sdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  fclose(f);
  return s;
}

nvrtcResult nvrtcCompileProgram(prog_t *p, int nopts, const char *const *opts) {
  if (!p) return INVALID_PROGRAM;
  uint64_t h = fnv(0xcbf29ce484222325ULL, p->src);
  for (int i = 0; i < p->nheaders; i++) h = fnv(fnv(h, p->includes[i]), p->headers[i]);
  for (int i = 0; i < nopts; i++) h = fnv(h, opts[i]);
  const char *base = getenv("KFFAKE_NVRTC_DIR");
  char root[3000], dir[3100], path[3300], so[3300], logp[3300];
  if (base && *base) snprintf(root, sizeof root, "%s", base);
  else snprintf(root, sizeof root, "/tmp/kffake-nvrtc-%d", (int)getuid());
  mkdir(root, 0755);
  snprintf(dir, sizeof dir, "%s/%016llx", root, (unsigned long long)h);
  snprintf(so, sizeof so, "%s/kernels.so", dir);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  int rc = OK;
  if (access(so, F_OK)) {
    char tmp[3200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", dir, (int)getpid());
    mkdir(tmp, 0755);
    snprintf(path, sizeof path, "%s/program.c", tmp);
    write_text(path, p->src);
    for (int i = 0; i < p->nheaders; i++) {
      char hp[3500];
      snprintf(hp, sizeof hp, "%s/%s", tmp, p->includes[i]);
      write_text(hp, p->headers[i]);
    }
    char *argv[80], inc[3300], out[3300], defs[8][600];
    int a = 0, nd = 0;
    const char *cc = getenv("CC");
    argv[a++] = (char *)(cc && *cc ? cc : "cc");
    argv[a++] = "-shared", argv[a++] = "-fPIC", argv[a++] = "-O1";
    snprintf(inc, sizeof inc, "-I%s", tmp);
    argv[a++] = inc;
    for (int i = 0; i < nopts && a < 70; i++) {
      if (!strncmp(opts[i], "-D", 2) || !strncmp(opts[i], "-I", 2)) argv[a++] = (char *)opts[i];
      else if (!strcmp(opts[i], "--use_fast_math")) argv[a++] = "-DKF_FAST_MATH";
      else if (!strncmp(opts[i], "--maxrregcount=", 15) && nd < 8) {
        snprintf(defs[nd], sizeof defs[nd], "-DKF_MAXRREG=%s", opts[i] + 15);
        argv[a++] = defs[nd++];
      }
    }
    snprintf(out, sizeof out, "%s/kernels.so", tmp);
    argv[a++] = "-o", argv[a++] = out, argv[a++] = path, argv[a] = NULL;
    char tlog[3300];
    snprintf(tlog, sizeof tlog, "%s/log.txt", tmp);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, tlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int status = -1;
    unsetenv("LD_PRELOAD"); /* the compiler need not run under the interposer */
    if (!posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ)) waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    if (status != 0) rc = COMPILATION;
    if (rc || rename(tmp, dir)) { /* failed, or another process made it first */
      free(p->log);
      p->log = read_text(tlog);
      char cmd[7000];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
      if (system(cmd)) { /* best effort */ }
      if (rc) return rc;
    }
  }
  free(p->log);
  p->log = read_text(logp);
  snprintf(p->image, sizeof p->image, "KFFAKE %s\n", so);
  snprintf(p->ptx, sizeof p->ptx, "KFFAKE %s\n.target fake\n", so);
  p->compiled = 1;
  return rc;
}

nvrtcResult nvrtcGetProgramLogSize(prog_t *p, size_t *n) { *n = strlen(p->log ? p->log : "") + 1; return OK; }
nvrtcResult nvrtcGetProgramLog(prog_t *p, char *log) { strcpy(log, p->log ? p->log : ""); return OK; }
nvrtcResult nvrtcGetCUBINSize(prog_t *p, size_t *n) {
  if (!p->compiled) return INVALID_PROGRAM;
  *n = strlen(p->image) + 1;
  return OK;
}
nvrtcResult nvrtcGetCUBIN(prog_t *p, char *out) {
  if (!p->compiled) return INVALID_PROGRAM;
  memcpy(out, p->image, strlen(p->image) + 1);
  return OK;
}
nvrtcResult nvrtcGetPTXSize(prog_t *p, size_t *n) {
  if (!p->compiled) return INVALID_PROGRAM;
  *n = strlen(p->ptx) + 1;
  return OK;
}
nvrtcResult nvrtcGetPTX(prog_t *p, char *out) {
  if (!p->compiled) return INVALID_PROGRAM;
  memcpy(out, p->ptx, strlen(p->ptx) + 1);
  return OK;
}
