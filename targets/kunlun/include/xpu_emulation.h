// Host emulation of the Kunlun XPU kernel dialect, force-included (-include xpu_emulation.h) when
// no XTDK is installed, so the very same .xpu text builds with the system C++ compiler.
//  - qualifiers (__global__, __device__, __global_ptr__, __local__, __shared__, __simd__) expand to
//    host C++; ids (cluster_id/core_id/cluster_num/core_num) are thread-local, set by the launch;
//  - GM2LM/LM2GM (and GM2SM/SM2GM) are memcpy with a bounds check against the tensors the
//    launcher registered: a copy outside them is skipped and sets an error the launcher raises,
//    naming the load or store (TJ_SITE, set before its copies), the argument and the range;
//  - TJ_LM_USE(buf) accounts each live __local__ buffer per core against TJ_EMU_LM_BUDGET bytes;
//  - tj_emu_launch runs clusters x cores programs in parallel (OpenMP over the flat core id); a
//    kernel with SM staging runs the cores of each cluster as coroutines instead, sharing that
//    cluster's SM, with sync_cluster() a real barrier that fails (never hangs) when the cores do
//    not all reach it equally often.
#pragma once
#define TJ_XPU_EMULATION 1
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <atomic>
#include <stdlib.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __global_ptr__
#define __local__
#define __shared_ptr__
#define TJ_SM_ARENA(name, bytes) char* const name = tj_emu_sm(bytes)   /* this cluster's SM */
#define __simd__ alignas(64)

#ifndef TJ_EMU_SM_BYTES
#define TJ_EMU_SM_BYTES (256 * 1024)   // SM per cluster (the arch's figure)
#endif
#ifndef TJ_EMU_LM_BUDGET
#define TJ_EMU_LM_BUDGET 7168
#endif

static thread_local int tj_emu_cluster_id = 0, tj_emu_core_id = 0, tj_emu_lm_live = 0;
static int tj_emu_cluster_num = 1, tj_emu_core_num = 1;
static inline int cluster_id() { return tj_emu_cluster_id; }
static inline int core_id() { return tj_emu_core_id; }
static inline int cluster_num() { return tj_emu_cluster_num; }
static inline int core_num() { return tj_emu_core_num; }

// ---- error flag: the first error wins, the launcher turns it into a Python exception ---------
static std::atomic<int> tj_emu_err(0);
static char tj_emu_msg[512];
static void tj_emu_fail(const char* fmt, const char* what, uint64_t a, uint64_t b) {
    int expected = 0;
    if (tj_emu_err.compare_exchange_strong(expected, 1))
        snprintf(tj_emu_msg, sizeof tj_emu_msg, fmt, what, (unsigned long long)a, (unsigned long long)b,
                 tj_emu_cluster_id, tj_emu_core_id);
}
// What the first out-of-bounds DMA was, for the launcher's message: the site (the index of the load
// or store op in the kernel's IR, set by the TJ_SITE statement the lowering emits before its copies),
// the GM address and bytes, and whether it stored (LM2GM) or loaded (GM2LM).
static thread_local int tj_emu_site = -1;
#define TJ_SITE(n) (tj_emu_site = (n))
static long long tj_emu_fault_info[4] = {-1, 0, 0, 0};   // site, address, bytes, store
static void tj_emu_fail_dma(const char* what, const void* gm, int bytes, int store) {
    int expected = 0;
    if (tj_emu_err.compare_exchange_strong(expected, 1)) {
        snprintf(tj_emu_msg, sizeof tj_emu_msg, "%s: GM address 0x%llx (+%llu bytes) is outside every tensor passed to "
                 "the kernel (cluster %d, core %d)", what, (unsigned long long)(uintptr_t)gm, (unsigned long long)bytes,
                 tj_emu_cluster_id, tj_emu_core_id);
        tj_emu_fault_info[0] = tj_emu_site;
        tj_emu_fault_info[1] = (long long)(uintptr_t)gm;
        tj_emu_fault_info[2] = bytes;
        tj_emu_fault_info[3] = store;
    }
}
static void tj_emu_fail_text(const char* text) {
    int expected = 0;
    if (tj_emu_err.compare_exchange_strong(expected, 1))
        snprintf(tj_emu_msg, sizeof tj_emu_msg, "%s (cluster %d, core %d)", text, tj_emu_cluster_id, tj_emu_core_id);
}

// ---- global-memory regions registered by the launcher ---------------------------------------
#define TJ_EMU_MAX_REGIONS 64
static int tj_emu_nregions = 0;
static uint64_t tj_emu_lo[TJ_EMU_MAX_REGIONS], tj_emu_hi[TJ_EMU_MAX_REGIONS];
// the GM scratch workspace (TJ_SCRATCH_SLOT: its base and slot size): in it, a core reaches its own slot only
static std::atomic<uint64_t> tj_emu_ws(0), tj_emu_ws_slot(0);
#define TJ_SCRATCH_SLOT(ws, slot_bytes) \
    (tj_emu_ws.store((uint64_t)(uintptr_t)(ws)), tj_emu_ws_slot.store((uint64_t)(slot_bytes)))
static inline bool tj_emu_in_gm(const void* p, int bytes) {
    uint64_t a = (uint64_t)(uintptr_t)p, b = a + (uint64_t)(bytes < 0 ? 0 : bytes);
    const uint64_t ws = tj_emu_ws.load(), slot = tj_emu_ws_slot.load();
    if (slot && a >= ws && a < ws + slot * (uint64_t)(tj_emu_cluster_num * tj_emu_core_num)) {
        const uint64_t lo = ws + slot * (uint64_t)(tj_emu_cluster_id * tj_emu_core_num + tj_emu_core_id);
        return a >= lo && b <= lo + slot;
    }
    for (int i = 0; i < tj_emu_nregions; ++i)
        if (a >= tj_emu_lo[i] && b <= tj_emu_hi[i]) return true;
    return false;
}
// ---- the fence rules (targets/kunlun/plan/fences.py), checked per 4-byte granule of the arena ----
// Each granule remembers the accesses no fence has ordered yet: vector reads/writes (racing scalar
// code until mfence_lm, DMA until mfence) and scalar accesses (TJ_LM_SCALAR, racing vectors).
// An access that meets a pending one of another unit it races is an emulation error.
// An asynchronous DMA's LM bytes (TJ_PA) race every unit, itself included, until mfence.
enum { TJ_PV_W = 1, TJ_PV_R = 2, TJ_PS = 4, TJ_PV_W_DMA = 8, TJ_PV_R_DMA = 16, TJ_PA = 32 };
#define TJ_EMU_GRANULES 4096
static thread_local uint8_t tj_emu_pend[TJ_EMU_GRANULES];
static thread_local const char* tj_emu_arena = 0;
static thread_local int tj_emu_arena_bytes = 0;
static inline void tj_emu_set_arena(const char* base, int bytes) {
    tj_emu_arena = base;
    tj_emu_arena_bytes = bytes < 4 * TJ_EMU_GRANULES ? bytes : 4 * TJ_EMU_GRANULES;
    memset(tj_emu_pend, 0, sizeof tj_emu_pend);
}
static inline void tj_emu_order(const void* p, int bytes, uint8_t races, uint8_t leaves, const char* what) {
    if (!tj_emu_arena || bytes <= 0) return;
    long off = (long)((const char*)p - tj_emu_arena);
    if (off < 0 || off >= tj_emu_arena_bytes) return;   // not the arena: a register's copy
    long end = off + bytes < tj_emu_arena_bytes ? off + bytes : tj_emu_arena_bytes;
    for (long g = off / 4; g < (end + 3) / 4; ++g) {
        if (tj_emu_pend[g] & TJ_PA) {
            tj_emu_fail("%s: arena bytes %llu..%llu are still under an asynchronous DMA (GM2LM_ASYNC/LM2GM_ASYNC), "
                        "with no fence between: mfence() waits for it (cluster %d, core %d)", what, (uint64_t)(4 * g), (uint64_t)(4 * g + 3));
            return;
        }
        if (tj_emu_pend[g] & races) {
            tj_emu_fail("%s: arena bytes %llu..%llu are still pending from another unit, with no fence between "
                        "(cluster %d, core %d)", what, (uint64_t)(4 * g), (uint64_t)(4 * g + 3));
            return;
        }
    }
    for (long g = off / 4; g < (end + 3) / 4; ++g) tj_emu_pend[g] |= leaves;
}
static inline void mfence_lm() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (int g = 0; g < TJ_EMU_GRANULES; ++g) tj_emu_pend[g] &= (uint8_t)~(TJ_PV_W | TJ_PV_R | TJ_PS);
}
static inline void mfence() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    memset(tj_emu_pend, 0, sizeof tj_emu_pend);
}
#define TJ_LM_ARENA(buf) tj_emu_set_arena((const char*)(buf), (int)sizeof(buf))
#define TJ_LM_SCALAR(buf, bytes) \
    tj_emu_order((buf), (bytes), TJ_PV_W | TJ_PV_R, TJ_PS, "scalar access of " #buf " after vector loads/stores")

static inline void GM2LM(const void* src, void* dst, int bytes) {
    tj_emu_order(dst, bytes, TJ_PV_W_DMA | TJ_PV_R_DMA, 0, "GM2LM over LM a vector load/store has not finished with");
    if (!tj_emu_in_gm(src, bytes)) {
        tj_emu_fail_dma("GM2LM", src, bytes, 0);
        return;
    }
    memcpy(dst, src, bytes);
}
static inline void LM2GM(const void* src, void* dst, int bytes) {
    tj_emu_order(src, bytes, TJ_PV_W_DMA, 0, "LM2GM of LM written by vector stores");
    if (!tj_emu_in_gm(dst, bytes)) {
        tj_emu_fail_dma("LM2GM", dst, bytes, 1);
        return;
    }
    memcpy(dst, src, bytes);
}
// The asynchronous forms copy at once but leave their LM bytes pending (TJ_PA) until mfence():
// code that touches them before the wait fails here, as it would read or clobber a copy in flight.
static inline void GM2LM_ASYNC(const void* src, void* dst, int bytes) {
    GM2LM(src, dst, bytes);
    tj_emu_order(dst, bytes, 0, TJ_PA, "GM2LM_ASYNC");
}
static inline void LM2GM_ASYNC(const void* src, void* dst, int bytes) {
    LM2GM(src, dst, bytes);
    tj_emu_order(src, bytes, 0, TJ_PA, "LM2GM_ASYNC");
}
#define GM2SM GM2LM
#define SM2GM LM2GM

// ---- 16-lane fp32 SIMD (xtdk_simd.h names); vector loads/stores need 64-byte aligned LM ----------
struct float32x16_t { float v[16]; };
static inline void tj_emu_check_simd(const void* p, const char* what) {
    if ((uintptr_t)p & 63) tj_emu_fail("%s: LM address 0x%llx is not 64-byte aligned (offset %llu; cluster %d, core %d)", what,
                                       (uint64_t)(uintptr_t)p, (uint64_t)((uintptr_t)p & 63));
}
// a 16-lane vector type's LM load and store: aligned, and checked against the fence rules
#define TJ_EMU_LM_VECTOR(T, VT, LOAD, STORE) \
    static inline VT LOAD(const T* p) { \
        tj_emu_check_simd(p, #LOAD); \
        tj_emu_order(p, 64, TJ_PS, TJ_PV_R | TJ_PV_R_DMA, #LOAD " of LM scalar code touched"); \
        VT r; memcpy(r.v, p, sizeof r.v); return r; } \
    static inline void STORE(T* p, VT x) { \
        tj_emu_check_simd(p, #STORE); \
        tj_emu_order(p, 64, TJ_PS, TJ_PV_W | TJ_PV_W_DMA, #STORE " over LM scalar code touched"); \
        memcpy(p, x.v, sizeof x.v); }
TJ_EMU_LM_VECTOR(float, float32x16_t, vload_lm_float32x16, vstore_lm_float32x16)
#define TJ_EMU_VV(NAME, EXPR) \
    static inline float32x16_t NAME(float32x16_t a, float32x16_t b) { \
        float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = (EXPR); return r; }
TJ_EMU_VV(vvadd_float32x16, a.v[i] + b.v[i])
TJ_EMU_VV(vvmul_float32x16, a.v[i] * b.v[i])
TJ_EMU_VV(vvmax_float32x16, a.v[i] > b.v[i] ? a.v[i] : b.v[i])
// 16 lanes of 32 bits, moved between LM and SM unchanged (SM staging's copies); SM is not checked
// against the LM fence rules (it is ordered by mfence_sm and the cluster barrier)
struct int32x16_t { int v[16]; };
TJ_EMU_LM_VECTOR(int, int32x16_t, vload_lm_int32x16, vstore_lm_int32x16)
static inline int32x16_t vload_sm_int32x16(const int* p) {
    tj_emu_check_simd(p, "vload_sm_int32x16");
    int32x16_t r; memcpy(r.v, p, sizeof r.v); return r;
}
static inline void vstore_sm_int32x16(int* p, int32x16_t x) {
    tj_emu_check_simd(p, "vstore_sm_int32x16");
    memcpy(p, x.v, sizeof x.v);
}
// 32-bit words of SM through registers (the guide's SM2REG_atomic / REG2SM_atomic, Kunlun 2)
static inline int SM2REG_atomic(const int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline int REG2SM_atomic(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); return 0; }
static inline void mfence_sm() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// 32 fp16 lanes (xpu3): loaded from 64-byte aligned LM, widened as the low and the high 16
struct float16x32_t { uint16_t v[32]; };
static inline float tj_h2f(uint16_t h);   // tilejit_xpu.h's exact conversion
static inline float16x32_t vload_lm_float16x32(const void* p) {
    tj_emu_check_simd(p, "vload_lm_float16x32");
    tj_emu_order(p, 64, TJ_PS, TJ_PV_R | TJ_PV_R_DMA, "vload_lm_float16x32 of LM scalar code touched");
    float16x32_t r; memcpy(r.v, p, sizeof r.v); return r;
}
static inline float32x16_t vfp162float_l(float16x32_t x) {
    float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = tj_h2f(x.v[i]); return r;
}
static inline float32x16_t vfp162float_h(float16x32_t x) {
    float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = tj_h2f(x.v[16 + i]); return r;
}
static inline float32x16_t svmul_float32x16(float s, float32x16_t b) {
    float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = s * b.v[i]; return r;
}
static inline float32x16_t svadd_float32x16(float s, float32x16_t b) {
    float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = s + b.v[i]; return r;
}
// s * b + c with one rounding per lane (the SIMD multiply-accumulate)
static inline float32x16_t svmac_float32x16(float s, float32x16_t b, float32x16_t c) {
    float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = __builtin_fmaf(s, b.v[i], c.v[i]); return r;
}

// ---- run-time LM budget: live __local__ buffers of one core -------------------------------
struct tj_emu_lm_guard {
    int bytes;
    explicit tj_emu_lm_guard(int b, const char* name) : bytes(b) {
        tj_emu_lm_live += b;
        if (tj_emu_lm_live > TJ_EMU_LM_BUDGET)
            tj_emu_fail("%s: local memory overflow: %llu bytes of __local__ buffers live on one core, budget %llu "
                        "(cluster %d, core %d)", name, (uint64_t)tj_emu_lm_live, (uint64_t)TJ_EMU_LM_BUDGET);
    }
    ~tj_emu_lm_guard() { tj_emu_lm_live -= bytes; }
};
#define TJ_LM_USE(buf) tj_emu_lm_guard tj_lm_guard_##buf((int)sizeof(buf), #buf)

// ---- the kernel as a callable, and per-thread scratch buffers ----------------------------------
// A function pointer and its lambda rather than std::function and std::vector: <functional> and
// <vector> would add ~0.2 s to every emulation build, a third of a small kernel's.
struct tj_emu_fn {
    void (*call)(const void*);
    const void* self;
};
struct tj_emu_buf {
    char* p;
    size_t n;
};
static inline char* tj_emu_sized(tj_emu_buf& b, size_t n) {   // at least n bytes (contents kept)
    if (b.n < n) {
        char* q = (char*)realloc(b.p, n);
        if (!q) { fprintf(stderr, "tilejit kunlun emulation: out of host memory (%zu bytes)\n", n); abort(); }
        b.p = q;
        b.n = n;
    }
    return b.p;
}
static inline char* tj_emu_zeroed(tj_emu_buf& b, size_t n) { return (char*)memset(tj_emu_sized(b, n), 0, n); }

// ---- a cluster of a staged launch: its SM, and its cores as coroutines on one host thread ------
// The cores take turns: each runs until it reaches sync_cluster() or finishes; when every core that
// has not finished waits, the barrier opens. A core that finishes while others wait (or a barrier
// reached by fewer than all) is an error, reported, never a hang. The per-core emulation state
// (ids, LM accounting, pending fence state) is swapped with the running core.
enum { TJ_CORE_RUN, TJ_CORE_WAIT, TJ_CORE_DONE };
struct tj_emu_core {
    ucontext_t ctx;
    int state, lm_live, arena_bytes;
    const char* arena;
    uint8_t pend[TJ_EMU_GRANULES];
};
struct tj_emu_cluster {
    ucontext_t scheduler;
    tj_emu_core* cores;
    int current;
    char* sm;
    const tj_emu_fn* kernel;
};
static thread_local tj_emu_cluster* tj_emu_here = 0;
static inline char* tj_emu_sm(int bytes) {
    if (!tj_emu_here || bytes > TJ_EMU_SM_BYTES) {
        tj_emu_fail("%s: %llu bytes of SM asked for, %llu available (cluster %d, core %d)", "TJ_SM_ARENA",
                    (uint64_t)bytes, (uint64_t)(tj_emu_here ? TJ_EMU_SM_BYTES : 0));
        static thread_local tj_emu_buf none;
        char* p = tj_emu_zeroed(none, (size_t)(bytes > 0 ? bytes : 0) + 128);
        return (char*)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    }
    return tj_emu_here->sm;
}
static inline void sync_cluster() {
    tj_emu_cluster* c = tj_emu_here;
    if (!c) {
        tj_emu_fail_text("sync_cluster: called by a kernel launched without SM staging");
        return;
    }
    tj_emu_core* me = &c->cores[c->current];
    me->state = TJ_CORE_WAIT;
    swapcontext(&me->ctx, &c->scheduler);
}
static void tj_emu_core_main() {
    tj_emu_cluster* c = tj_emu_here;
    c->kernel->call(c->kernel->self);
    c->cores[c->current].state = TJ_CORE_DONE;   // returns to the scheduler (uc_link)
}
static void tj_emu_run_cluster(int cluster, int cores, const tj_emu_fn& kernel) {
    const size_t stack_bytes = 256 * 1024;
    static thread_local tj_emu_buf stacks_buf, sm_buf, state_buf;
    char* stacks = tj_emu_sized(stacks_buf, stack_bytes * cores);
    char* sm = tj_emu_zeroed(sm_buf, TJ_EMU_SM_BYTES + 64);
    tj_emu_core* state = (tj_emu_core*)tj_emu_sized(state_buf, sizeof(tj_emu_core) * cores);
    tj_emu_cluster c;
    c.cores = state;
    c.kernel = &kernel;
    c.sm = (char*)(((uintptr_t)sm + 63) & ~(uintptr_t)63);
    tj_emu_here = &c;
    tj_emu_cluster_id = cluster;
    for (int i = 0; i < cores; ++i) {
        tj_emu_core& k = state[i];
        k.state = TJ_CORE_RUN;
        k.lm_live = 0;
        k.arena = 0;
        k.arena_bytes = 0;
        memset(k.pend, 0, sizeof k.pend);
        getcontext(&k.ctx);
        k.ctx.uc_stack.ss_sp = stacks + stack_bytes * i;
        k.ctx.uc_stack.ss_size = stack_bytes;
        k.ctx.uc_link = &c.scheduler;
        makecontext(&k.ctx, tj_emu_core_main, 0);
    }
    for (;;) {
        int waiting = 0, done = 0;
        for (int i = 0; i < cores; ++i) {
            tj_emu_core& k = state[i];
            if (k.state == TJ_CORE_RUN) {
                c.current = i;
                tj_emu_core_id = i;
                tj_emu_lm_live = k.lm_live;
                tj_emu_arena = k.arena;
                tj_emu_arena_bytes = k.arena_bytes;
                memcpy(tj_emu_pend, k.pend, sizeof k.pend);
                swapcontext(&c.scheduler, &k.ctx);
                k.lm_live = tj_emu_lm_live;
                k.arena = tj_emu_arena;
                k.arena_bytes = tj_emu_arena_bytes;
                memcpy(k.pend, tj_emu_pend, sizeof k.pend);
            }
            waiting += k.state == TJ_CORE_WAIT;
            done += k.state == TJ_CORE_DONE;
        }
        if (waiting == 0) break;
        if (done > 0)
            tj_emu_fail_text("sync_cluster: some cores of this cluster finished their kernel while others wait at "
                             "the barrier: the cores do not reach it equally often");
        for (int i = 0; i < cores; ++i)
            if (state[i].state == TJ_CORE_WAIT) state[i].state = TJ_CORE_RUN;
    }
    tj_emu_here = 0;
}

// ---- launch -----------------------------------------------------------------------------------
static int tj_emu_launch_fn(int clusters, int cores, bool staged, const tj_emu_fn& kernel) {
    tj_emu_cluster_num = clusters;
    tj_emu_core_num = cores;
    if (staged) {   // the clusters in parallel, the cores of each as coroutines (above)
#pragma omp parallel for schedule(dynamic)
        for (int cl = 0; cl < clusters; ++cl)
            if (!tj_emu_err.load(std::memory_order_relaxed)) tj_emu_run_cluster(cl, cores, kernel);
        return tj_emu_err.load() ? -1 : 0;
    }
    const int total = clusters * cores;
#pragma omp parallel for schedule(static)
    for (int flat = 0; flat < total; ++flat) {
        tj_emu_cluster_id = flat / cores;
        tj_emu_core_id = flat % cores;
        tj_emu_lm_live = 0;
        if (!tj_emu_err.load(std::memory_order_relaxed)) kernel.call(kernel.self);
    }
    return tj_emu_err.load() ? -1 : 0;
}
template <class F> static int tj_emu_launch(int clusters, int cores, bool staged, const F& kernel) {
    return tj_emu_launch_fn(clusters, cores, staged, tj_emu_fn{[](const void* f) { (*(const F*)f)(); }, &kernel});
}
template <class F> static int tj_emu_launch(int clusters, int cores, const F& kernel) {
    return tj_emu_launch(clusters, cores, false, kernel);
}

extern "C" void tj_emu_set_regions(int n, const uint64_t* lo, const uint64_t* hi) {
    tj_emu_nregions = n < TJ_EMU_MAX_REGIONS ? n : TJ_EMU_MAX_REGIONS;
    for (int i = 0; i < tj_emu_nregions; ++i) { tj_emu_lo[i] = lo[i]; tj_emu_hi[i] = hi[i]; }
    tj_emu_err.store(0);
    tj_emu_msg[0] = 0;
    tj_emu_fault_info[0] = -1;
}
extern "C" const char* tj_emu_error() { return tj_emu_msg; }
// the first out-of-bounds DMA of the launch (site, GM address, bytes, store); site -1: none
extern "C" void tj_emu_fault(long long* out) { for (int i = 0; i < 4; ++i) out[i] = tj_emu_fault_info[i]; }
