"""The host emulator's runtime (C++, compiled once per compiler): blocks, threads, barriers.

``kf_emu_launch`` runs a grid's blocks one after another (in the order given, a permutation of
the linear block indices), each on ``T = blockDim.x*y*z`` host threads created once per launch
(pthreads, 1 MiB stacks) that stay for all its blocks. Semantics (see :mod:`.emulate`):

- ``__syncthreads`` is a barrier over the block's *live* threads: a thread that returns from the
  kernel drops out of it (what the hardware does for exited warps), so ``if (out) return;``
  before a barrier works; ``__syncthreads_count/and/or`` reduce over the arrivals.
- ``__syncwarp``, the shuffles and the votes are barriers over the live lanes of one warp
  (32 consecutive linear thread ids); a mask must include every live lane of the warp (partial
  masks are reported, not emulated).
- When every live thread of a block waits in a barrier that cannot complete, the launch fails
  with a deadlock report instead of hanging; ``__trap``/``assert`` fail it with their message.
- Between blocks the dynamic shared memory is filled with 0xFF bytes (NaN in every float type),
  so reading it before writing shows.
"""

from __future__ import annotations

from .emulate_cxx import ABI

RUNTIME = r"""// kernforge host emulation runtime (kernforge/stencil/emulate_runtime.py)
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
""" + ABI + r"""
namespace {
struct Abort {};
struct Bar { unsigned expected = 0, count = 0; std::atomic<unsigned> gen{0}; };
struct Launch;
struct Thread { kf_ctx ctx; Launch* L; unsigned parity; pthread_t handle; };
struct Launch {
  void (*thunk)(void**, kf_ctx*);
  void** args;
  unsigned grid[3], block[3], T, W;
  unsigned long long nblocks;
  const unsigned long long* order;
  unsigned char* smem;
  unsigned long long smem_bytes;
  std::mutex m;
  Bar blk, end;
  std::unique_ptr<Bar[]> warps;
  std::unique_ptr<unsigned[]> live_lanes;
  std::unique_ptr<unsigned long long[]> slots;  // [warp][parity][lane]
  unsigned live = 0, blocked = 0, phase = 0;
  int red_true[2] = {0, 0}, red_all[2] = {0, 0};
  std::atomic<bool> aborted{false};
  unsigned start = 0;
  std::condition_variable start_cv;
  char err[2048] = {0};
};

unsigned lanes_of(const Launch* L, unsigned w) { return w + 1 < L->W ? 32u : L->T - 32u * w; }
unsigned full_mask(unsigned n) { return n >= 32 ? 0xffffffffu : (1u << n) - 1u; }
void wake(Bar& b) { b.gen.fetch_add(1); b.gen.notify_all(); }  // L->m held

void fail(Launch* L, const kf_ctx* c, const char* what) {  // L->m held
  if (!L->aborted.load()) {
    if (c) snprintf(L->err, sizeof L->err, "%s (block (%u,%u,%u), thread (%u,%u,%u))", what,
                    c->bid.x, c->bid.y, c->bid.z, c->tid.x, c->tid.y, c->tid.z);
    else snprintf(L->err, sizeof L->err, "%s", what);
    L->aborted.store(true);
  }
  wake(L->blk);
  for (unsigned w = 0; w < L->W; ++w) wake(L->warps[w]);
}

void release(Launch* L, Bar& b, unsigned waiters) {  // L->m held
  L->blocked -= waiters;
  b.count = 0;
  if (&b == &L->blk) {
    ++L->phase;
    L->red_true[L->phase & 1] = L->red_all[L->phase & 1] = 0;
  }
  wake(b);
}

void check_deadlock(Launch* L, const kf_ctx* c) {
  if (L->live && L->blocked == L->live)
    fail(L, c, "deadlock: every live thread of the block waits in a barrier that cannot "
               "complete (__syncthreads or __syncwarp/shuffle/vote reached by only some threads)");
}

void arrive(Launch* L, Bar& b, const kf_ctx* c, std::unique_lock<std::mutex>& lk) {
  if (L->aborted.load()) throw Abort{};
  const unsigned g = b.gen.load();
  if (++b.count == b.expected) { release(L, b, b.count - 1); return; }
  ++L->blocked;
  check_deadlock(L, c);
  lk.unlock();  // futex wait on the generation: no lock convoy when a phase releases
  b.gen.wait(g);
  lk.lock();
  if (L->aborted.load()) throw Abort{};
}

void drop(Launch* L, Bar& b) {  // L->m held: a thread left the kernel
  --b.expected;
  if (b.count && b.count == b.expected) release(L, b, b.count);
}

void reset_block(Launch* L) {  // L->m held, every thread at the end barrier
  L->blk.expected = L->T; L->blk.count = 0;
  for (unsigned w = 0; w < L->W; ++w) {
    L->warps[w].expected = lanes_of(L, w); L->warps[w].count = 0;
    L->live_lanes[w] = full_mask(lanes_of(L, w));
  }
  L->live = L->T; L->blocked = 0; L->phase = 0;
  L->red_true[0] = L->red_true[1] = L->red_all[0] = L->red_all[1] = 0;
  memset(L->smem, 0xFF, L->smem_bytes);
}

void check_mask(Launch* L, kf_ctx* c, unsigned mask) {  // L->m held
  const unsigned live = L->live_lanes[c->warp];
  if ((mask & live) != live) {
    fail(L, c, "a warp-level mask that leaves out live lanes of the warp (partial-warp "
               "synchronization is not emulated)");
    throw Abort{};
  }
}

int f_sync(kf_ctx* c, int op, int pred) {
  Thread* t = static_cast<Thread*>(c->impl);
  Launch* L = t->L;
  std::unique_lock<std::mutex> lk(L->m);
  const unsigned p = L->phase & 1;
  L->red_true[p] += pred != 0;
  L->red_all[p] += 1;
  arrive(L, L->blk, c, lk);
  const int n = L->red_true[p], all = L->red_all[p];
  return op == 1 ? n : op == 2 ? n == all : op == 3 ? n > 0 : 0;
}

void f_syncwarp(kf_ctx* c, unsigned mask) {
  Launch* L = static_cast<Thread*>(c->impl)->L;
  std::unique_lock<std::mutex> lk(L->m);
  check_mask(L, c, mask);
  arrive(L, L->warps[c->warp], c, lk);
}

const unsigned long long* f_exchange(kf_ctx* c, unsigned long long v, unsigned mask) {
  Thread* t = static_cast<Thread*>(c->impl);
  Launch* L = t->L;
  unsigned long long* s = &L->slots[(c->warp * 2 + t->parity) * 32];
  t->parity ^= 1u;  // double-buffered: the next exchange writes the other half
  std::unique_lock<std::mutex> lk(L->m);
  check_mask(L, c, mask);
  s[c->lane] = v;
  arrive(L, L->warps[c->warp], c, lk);
  return s;
}

void f_trap(kf_ctx* c, const char* message) {
  Launch* L = static_cast<Thread*>(c->impl)->L;
  {
    std::lock_guard<std::mutex> lk(L->m);
    fail(L, c, message);
  }
  throw Abort{};
}

void leave_block(Thread* t) {
  Launch* L = t->L;
  std::unique_lock<std::mutex> lk(L->m);
  if (!L->aborted.load()) {
    --L->live;
    L->live_lanes[t->ctx.warp] &= ~(1u << t->ctx.lane);
    drop(L, L->blk);
    drop(L, L->warps[t->ctx.warp]);
    check_deadlock(L, &t->ctx);
  }
  const unsigned g = L->end.gen.load();
  if (++L->end.count == L->T) {
    L->end.count = 0;
    reset_block(L);
    wake(L->end);
    return;
  }
  lk.unlock();
  L->end.gen.wait(g);
}

void* thread_main(void* arg) {
  Thread* t = static_cast<Thread*>(arg);
  Launch* L = t->L;
  {
    std::unique_lock<std::mutex> lk(L->m);
    L->start_cv.wait(lk, [&] { return L->start != 0; });
    if (L->start != 1) return nullptr;
  }
  for (unsigned long long k = 0; k < L->nblocks; ++k) {
    const unsigned long long b = L->order ? L->order[k] : k;
    t->ctx.bid = kf_idx3{(unsigned)(b % L->grid[0]), (unsigned)(b / L->grid[0] % L->grid[1]),
                         (unsigned)(b / L->grid[0] / L->grid[1])};
    t->parity = 0;
    try {
      L->thunk(L->args, &t->ctx);
    } catch (Abort&) {
    } catch (...) {
      std::lock_guard<std::mutex> lk(L->m);
      fail(L, &t->ctx, "the kernel threw a C++ exception");
    }
    leave_block(t);
    if (L->aborted.load()) break;  // read after the end barrier: the same for every thread
  }
  return nullptr;
}
}  // namespace

// 0: done; 1: the kernel failed (message in err); 2: the threads could not be started.
extern "C" __attribute__((visibility("default")))
int kf_emu_launch(void (*thunk)(void**, kf_ctx*), void** args, const unsigned* grid,
                  const unsigned* block, unsigned long long smem_bytes,
                  const unsigned long long* order, char* err, unsigned long long errlen) {
  std::unique_ptr<Launch> L(new Launch());
  L->thunk = thunk; L->args = args; L->order = order;
  for (int i = 0; i < 3; ++i) { L->grid[i] = grid[i]; L->block[i] = block[i]; }
  L->T = block[0] * block[1] * block[2];
  L->W = (L->T + 31) / 32;
  L->nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
  L->smem_bytes = smem_bytes;
  std::unique_ptr<unsigned char, decltype(&free)> smem(
      static_cast<unsigned char*>(aligned_alloc(256, (smem_bytes + 256) / 256 * 256)), &free);
  L->smem = smem.get();
  L->warps.reset(new Bar[L->W]);
  L->live_lanes.reset(new unsigned[L->W]);
  L->slots.reset(new unsigned long long[L->W * 64]());
  std::unique_ptr<Thread[]> threads(new Thread[L->T]);
  reset_block(L.get());
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1u << 20);
  unsigned created = 0;
  for (unsigned i = 0; i < L->T; ++i, ++created) {
    Thread& t = threads[i];
    t.L = L.get();
    kf_ctx& c = t.ctx;
    c.tid = kf_idx3{i % block[0], i / block[0] % block[1], i / block[0] / block[1]};
    c.bdim = kf_idx3{block[0], block[1], block[2]};
    c.gdim = kf_idx3{grid[0], grid[1], grid[2]};
    c.lane = i % 32; c.warp = i / 32; c.warp_lanes = lanes_of(L.get(), i / 32);
    c.dyn_smem = L->smem; c.dyn_bytes = smem_bytes; c.impl = &t;
    c.sync = f_sync; c.syncwarp = f_syncwarp; c.exchange = f_exchange; c.trap = f_trap;
    if (pthread_create(&t.handle, &attr, thread_main, &t) != 0) break;
  }
  pthread_attr_destroy(&attr);
  {
    std::lock_guard<std::mutex> lk(L->m);
    L->start = created == L->T ? 1u : 2u;
  }
  L->start_cv.notify_all();
  for (unsigned i = 0; i < created; ++i) pthread_join(threads[i].handle, nullptr);
  if (created != L->T) {
    snprintf(err, errlen, "could only start %u of the block's %u host threads", created, L->T);
    return 2;
  }
  if (L->aborted.load()) { snprintf(err, errlen, "%s", L->err); return 1; }
  return 0;
}
"""
