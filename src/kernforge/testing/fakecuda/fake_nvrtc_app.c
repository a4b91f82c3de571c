/* A test application that compiles its kernel at run time with NVRTC, as CuPy does: it
 * dlopens libnvrtc.so (RTLD_LOCAL) and reaches it through dlsym, compiles a program with a
 * header, options and a name expression, loads the image NVRTC hands back with
 * cuModuleLoadData and launches the lowered name. Against the fake NVRTC (fake_nvrtc.c) the
 * "source" is C for the fake driver.
 *   fake_nvrtc_app STEPS N [ptx] [vary]
 * prints "checksum <value>" of y after STEPS launches of y = a * x + y (a = 0.5, or with
 * `vary` 0.5 + 0.125 * step: a scalar parameter that changes from launch to launch). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

static const char *HEADER =
    "#define THREADS(g, b) ((unsigned long)(g)[0] * (b)[0] * (g)[1] * (b)[1] * (g)[2] * (b)[2])\n";
static const char *SOURCE =
    "#include \"kf_fake.h\"\n"
    "/* axpy<float>(const float *x, float *y, float a, int n) -- caf\xc3\xa9 */\n"
    "const char *axpy_float_params = \"8,8,4,4\";\n"
    "void axpy_float(const unsigned *grid, const unsigned *block, void **p) {\n"
    "  const float *x = *(const float **)p[0];\n"
    "  float *y = *(float **)p[1];\n"
    "  float a = *(float *)p[2];\n"
    "  int n = *(int *)p[3];\n"
    "  unsigned long t = THREADS(grid, block);\n"
    "#ifdef KF_FAST_MATH\n"
    "  a = a * (1.0f + 1e-3f); /* another result, as a fast-math build may give */\n"
    "#endif\n"
    "#ifndef KF_REPS\n"
    "#define KF_REPS 64 /* work a tuned build can drop: the same result, faster */\n"
    "#endif\n"
    "  for (unsigned long i = 0; i < t && i < (unsigned long)n; i++) {\n"
    "    volatile float v = 0;\n"
    "    for (int r = 0; r < KF_REPS; r++) v = a * x[i] + y[i];\n"
    "    y[i] = v;\n"
    "  }\n"
    "}\n";

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) { fprintf(stderr, "no %s\n", name); exit(3); }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: fake_nvrtc_app STEPS N [ptx] [vary]\n"); return 2; }
  int steps = atoi(argv[1]), n = atoi(argv[2]), ptx = 0, vary = 0;
  for (int i = 3; i < argc; i++) ptx |= !strcmp(argv[i], "ptx"), vary |= !strcmp(argv[i], "vary");
  void *nv = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
  if (!nv) { fprintf(stderr, "no libnvrtc.so\n"); return 3; }
  int (*create)(void **, const char *, const char *, int, const char *const *,
                const char *const *) = sym(nv, "nvrtcCreateProgram");
  int (*add)(void *, const char *) = sym(nv, "nvrtcAddNameExpression");
  int (*compile)(void *, int, const char *const *) = sym(nv, "nvrtcCompileProgram");
  int (*lowered)(void *, const char *, const char **) = sym(nv, "nvrtcGetLoweredName");
  int (*size)(void *, size_t *) = sym(nv, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize");
  int (*get)(void *, char *) = sym(nv, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
  int (*destroy)(void **) = sym(nv, "nvrtcDestroyProgram");
  const char *headers[] = {HEADER}, *names[] = {"kf_fake.h"};
  const char *opts[] = {"-arch=sm_90", "-DKF_FAKE=1", "--std=c++17"};
  void *prog;
  const char *name;
  size_t bytes;
  CHECK(create(&prog, SOURCE, "axpy.cu", 1, headers, names));
  CHECK(add(prog, "axpy<float>"));
  CHECK(compile(prog, 3, opts));
  CHECK(lowered(prog, "axpy<float>", &name));
  char entry[256];
  snprintf(entry, sizeof entry, "%s", name);
  CHECK(size(prog, &bytes));
  char *image = malloc(bytes);
  CHECK(get(prog, image));
  CHECK(destroy(&prog)); /* as CuPy does: the program is gone before the module is loaded */

  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa_t gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  void *f[8];
  const char *fns[] = {"cuInit", "cuMemAlloc", "cuMemcpyHtoD", "cuMemcpyDtoH",
                       "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel"};
  for (int i = 0; i < 7; i++) CHECK(gpa(fns[i], &f[i], 12000, 0, NULL) || !f[i]);
  CUresult (*init)(unsigned) = f[0];
  CUresult (*alloc)(CUdeviceptr *, size_t) = f[1];
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = f[2];
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = f[3];
  CUresult (*load)(void **, const void *) = f[4];
  CUresult (*getfn)(void **, void *, const char *) = f[5];
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) = f[6];
  CHECK(init(0));
  void *mod, *axpy;
  CHECK(load(&mod, image));
  free(image);
  CHECK(getfn(&axpy, mod, entry));
  float *h = malloc(n * sizeof *h);
  CUdeviceptr x, y;
  CHECK(alloc(&x, n * sizeof *h));
  CHECK(alloc(&y, n * sizeof *h));
  for (int i = 0; i < n; i++) h[i] = (float)(i % 13) / 13.0f;
  CHECK(htod(x, h, n * sizeof *h));
  CHECK(htod(y, h, n * sizeof *h));
  float a = 0.5f;
  unsigned block = 128, grid = (n + block - 1) / block;
  for (int s = 0; s < steps; s++) {
    if (vary) a = 0.5f + 0.125f * (float)s;
    void *args[] = {&x, &y, &a, &n};
    CHECK(launch(axpy, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL));
  }
  CHECK(dtoh(h, y, n * sizeof *h));
  double sum = 0;
  for (int i = 0; i < n; i++) sum += h[i] * (1 + i % 5);
  printf("checksum %.6f entry %s\n", sum, entry);
  return 0;
}
