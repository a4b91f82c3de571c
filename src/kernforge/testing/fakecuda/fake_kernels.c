/* Kernels for the fake CUDA driver (fake_cuda.c): host functions that loop over the grid.
 * Built twice by the tests: as is, and with -DKF_TUNED (the same results by another route, the
 * "tuned" image that a deployment swaps in; it counts its launches in `tuned_launches`). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define THREADS(g, b) ((size_t)(g)[0] * (b)[0] * (g)[1] * (b)[1] * (g)[2] * (b)[2])

/* heat(const double *in, double *out, int n, double c): one explicit 1D heat step */
const char *heat_params = "8,8,4,8";
long tuned_launches;
const size_t tuned_launches_size = sizeof(long);
void heat(const unsigned *grid, const unsigned *block, void **p) {
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2];
  double c = *(double *)p[3];
#ifdef KF_TUNED
  tuned_launches++;
  for (int i = 1; i < n - 1; i++) out[i] = in[i] + c * (in[i - 1] - 2 * in[i] + in[i + 1]);
  if (n > 1) out[0] = in[0], out[n - 1] = in[n - 1];
  (void)grid, (void)block;
#else
  size_t threads = THREADS(grid, block);
  for (size_t i = 0; i < threads && i < (size_t)n; i++)
    out[i] = (i == 0 || i == (size_t)n - 1) ? in[i]
                                            : in[i] + c * (in[i - 1] - 2 * in[i] + in[i + 1]);
#endif
}

/* heat_one(in, out, n, c): heat under another name, as a one-launch replacement of heat (the
 * fake driver's FAKE_CUDA_TRACE tells which of the two ran) */
const char *heat_one_params = "8,8,4,8";
void heat_one(const unsigned *grid, const unsigned *block, void **p) { heat(grid, block, p); }

/* scale(struct {double *data; long n; double factor;}): a struct by value holding a pointer */
typedef struct { double *data; long n; double factor; } span_t;
const char *scale_params = "24";
void scale(const unsigned *grid, const unsigned *block, void **p) {
  span_t s = *(span_t *)p[0];
  size_t threads = THREADS(grid, block);
  for (size_t i = 0; i < threads && i < (size_t)s.n; i++) s.data[i] *= s.factor;
}

/* gather(double **rows, int k, double *out): pointers kept inside device memory */
const char *gather_params = "8,4,8";
void gather(const unsigned *grid, const unsigned *block, void **p) {
  double *const *rows = *(double *const **)p[0];
  int k = *(int *)p[1];
  double *out = *(double **)p[2];
  (void)grid, (void)block;
  for (int i = 0; i < k; i++) out[i] = rows[i][i];
}

/* offset(double *x, double v): adds v to x[0..7] through an interior pointer */
const char *offset_params = "8,8";
double bias[4] = {0.5, 0.25, 0.125, 0.0625};
const size_t bias_size = sizeof bias;
void offset(const unsigned *grid, const unsigned *block, void **p) {
  double *x = *(double **)p[0];
  double v = *(double *)p[1];
  (void)grid, (void)block;
  for (int i = 0; i < 8; i++) x[i] += v + bias[i % 4];
}

/* blockwidth(double *out): out[0] = the block's x size, so a changed geometry changes it */
const char *blockwidth_params = "8";
void blockwidth(const unsigned *grid, const unsigned *block, void **p) {
  double *out = *(double **)p[0];
  (void)grid;
  out[0] = block[0];
}

/* crash(double *x): a kernel that faults (dereferences a null pointer) */
const char *crash_params = "8";
void crash(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block, (void)p;
  *(volatile double *)(uintptr_t)0 = 1.0;
}

/* heat_xT(in, out, n, c): T heat steps in one launch (a fused operator, as a temporal
 * deployment entry runs it): reads only `in`, leaves in `out` what T launches of heat with the
 * buffers swapped between them leave there, by the same arithmetic (bit for bit) */
long fused_launches;
const size_t fused_launches_size = sizeof(long);
static void heat_steps(void **p, int steps) {
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2];
  double c = *(double *)p[3];
  double *buf = malloc(2 * (size_t)n * sizeof *buf), *x = buf, *y = buf + n;
  if (!buf) return;
  for (int i = 0; i < n; i++) x[i] = in[i];
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < n; i++)
      y[i] = (i == 0 || i == n - 1) ? x[i] : x[i] + c * (x[i - 1] - 2 * x[i] + x[i + 1]);
    double *t = x;
    x = y, y = t;
  }
  for (int i = 0; i < n; i++) out[i] = x[i];
  free(buf);
  fused_launches++;
}
#define FUSED(T)                                                                  \
  const char *heat_x##T##_params = "8,8,4,8";                                     \
  void heat_x##T(const unsigned *grid, const unsigned *block, void **p) {         \
    (void)grid, (void)block;                                                      \
    heat_steps(p, T);                                                             \
  }
FUSED(3)
FUSED(5)
FUSED(7)
FUSED(63)

/* A time loop whose step is several launches (fake_loop.c's "b"): interior(in, out, n, c)
 * updates out's inner points only; its companions follow it: edge(out, n, side, v) sets one
 * face of out from its inner neighbour (side 0: out[0], 1: out[n-1]), and mix(in, out, n, w)
 * blends in's middle point into out's. interior_cT runs T such steps at once with the
 * companions' scalars baked in (V0, V1, W), by the same arithmetic (bit for bit); interior_nT
 * runs T interior steps without the companions (a fused operator that is wrong for this loop). */
const char *interior_params = "8,8,4,8";
void interior(const unsigned *grid, const unsigned *block, void **p) {
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2];
  double c = *(double *)p[3];
  size_t threads = THREADS(grid, block);
  for (size_t i = 1; i < threads && i + 1 < (size_t)n; i++)
    out[i] = in[i] + c * (in[i - 1] - 2 * in[i] + in[i + 1]);
}

const char *edge_params = "8,4,4,8";
void edge(const unsigned *grid, const unsigned *block, void **p) {
  double *out = *(double **)p[0];
  int n = *(int *)p[1], side = *(int *)p[2];
  double v = *(double *)p[3];
  (void)grid, (void)block;
  if (side == 0) out[0] = 0.5 * out[1] + v;
  else out[n - 1] = 0.5 * out[n - 2] + v;
}

const char *mix_params = "8,8,4,8";
void mix(const unsigned *grid, const unsigned *block, void **p) { /* a point a thread, from m */
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2], m = n / 2;
  double w = *(double *)p[3];
  for (size_t i = (size_t)m; i < (size_t)m + THREADS(grid, block) && i < (size_t)n; i++)
    out[i] = out[i] + w * (in[i] - out[i]);
}

static const double V0 = 0.125, V1 = -0.25, W = 0.375;
static void interior_steps(void **p, int steps, int companions) {
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2], m = n / 2;
  double c = *(double *)p[3];
  double *buf = malloc(2 * (size_t)n * sizeof *buf), *x = buf, *y = buf + n;
  if (!buf) return;
  for (int i = 0; i < n; i++) x[i] = in[i], y[i] = out[i];
  for (int s = 0; s < steps; s++) {
    for (int i = 1; i + 1 < n; i++) y[i] = x[i] + c * (x[i - 1] - 2 * x[i] + x[i + 1]);
    if (companions) {
      y[0] = 0.5 * y[1] + V0;
      y[n - 1] = 0.5 * y[n - 2] + V1;
      y[m] = y[m] + W * (x[m] - y[m]);
    }
    double *t = x;
    x = y, y = t;
  }
  for (int i = 0; i < n; i++) out[i] = x[i];
  free(buf);
  fused_launches++;
}
#define FUSED_STEP(T)                                                             \
  const char *interior_c##T##_params = "8,8,4,8";                                 \
  void interior_c##T(const unsigned *grid, const unsigned *block, void **p) {     \
    (void)grid, (void)block;                                                      \
    interior_steps(p, T, 1);                                                      \
  }                                                                               \
  const char *interior_n##T##_params = "8,8,4,8";                                 \
  void interior_n##T(const unsigned *grid, const unsigned *block, void **p) {     \
    (void)grid, (void)block;                                                      \
    interior_steps(p, T, 0);                                                      \
  }
FUSED_STEP(3)
FUSED_STEP(5)
FUSED_STEP(7)

/* A per-step diagnostic after a heat step (fake_loop.c's "l"): sqdiff(in, out, n, res) sets
 * res[0] = sum (out[i] - in[i])^2 (a reduction into a third buffer, elided from a fused step);
 * sqacc adds it to res[0] instead (it accumulates across steps: not elided). */
static double sq_sum(void **p) {
  const double *in = *(const double **)p[0], *out = *(const double **)p[1];
  int n = *(int *)p[2];
  double s = 0;
  for (int i = 0; i < n; i++) s += (out[i] - in[i]) * (out[i] - in[i]);
  return s;
}
const char *sqdiff_params = "8,8,4,8";
void sqdiff(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block;
  (*(double **)p[3])[0] = sq_sum(p);
}
const char *sqacc_params = "8,8,4,8";
void sqacc(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block;
  (*(double **)p[3])[0] += sq_sum(p);
}

/* A heat step whose coefficient is a module global (fake_guard.c's step "g"): cheat(in, out, n)
 * reads cheat_c, which the program may set (cuModuleGetGlobal + cuMemcpyHtoD). The tuned build's
 * cheat, and cheat_xT (T steps at once), bake its initial value in, as a lifted operator does. */
double cheat_c = 0.25;
const size_t cheat_c_size = sizeof cheat_c;
#define CHEAT_BAKED 0.25
static void cheat_steps(void **p, int steps, double c) {
  const double *in = *(const double **)p[0];
  double *out = *(double **)p[1];
  int n = *(int *)p[2];
  double *buf = malloc(2 * (size_t)n * sizeof *buf), *x = buf, *y = buf + n;
  if (!buf) return;
  for (int i = 0; i < n; i++) x[i] = in[i];
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < n; i++)
      y[i] = (i == 0 || i == n - 1) ? x[i] : x[i] + c * (x[i - 1] - 2 * x[i] + x[i + 1]);
    double *t = x;
    x = y, y = t;
  }
  for (int i = 0; i < n; i++) out[i] = x[i];
  free(buf);
}
const char *cheat_params = "8,8,4";
void cheat(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block;
#ifdef KF_TUNED
  tuned_launches++;
  cheat_steps(p, 1, CHEAT_BAKED);
#else
  cheat_steps(p, 1, cheat_c);
#endif
}
const char *setc_params = "8"; /* setc(double v): cheat_c = v, a kernel writing the global */
void setc(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block;
  cheat_c = *(double *)p[0];
}
const char *cheat_x5_params = "8,8,4";
void cheat_x5(const unsigned *grid, const unsigned *block, void **p) {
  (void)grid, (void)block;
  fused_launches++;
  cheat_steps(p, 5, CHEAT_BAKED);
}
