// Host emulation of the Kunlun XPU kernel dialect, force-included (-include xpu_emulation.h) when
// no XTDK is installed, so the very same .xpu text builds with the system C++ compiler.
//  - qualifiers (__global__, __device__, __global_ptr__, __local__, __shared__, __simd__) expand to
//    host C++; ids (cluster_id/core_id/cluster_num/core_num) are thread-local, set by the launch;
//  - GM2LM/LM2GM (and GM2SM/SM2GM) are memcpy with a bounds check against the tensors the
//    launcher registered: a copy outside them is skipped and sets an error the launcher raises;
//  - TJ_LM_USE(buf) accounts each live __local__ buffer per core against TJ_EMU_LM_BUDGET bytes;
//  - tj_emu_launch runs clusters x cores programs in parallel (OpenMP over the flat core id).
#pragma once
#define TJ_XPU_EMULATION 1
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <atomic>
#include <functional>

#define __global__
#define __device__
#define __global_ptr__
#define __local__
#define __shared__ static thread_local   /* per-cluster in hardware; never emitted by this slice */
#define __simd__ alignas(64)

#ifndef TJ_EMU_LM_BUDGET
#define TJ_EMU_LM_BUDGET 7168
#endif

static thread_local int tj_emu_cluster_id = 0, tj_emu_core_id = 0, tj_emu_lm_live = 0;
static int tj_emu_cluster_num = 1, tj_emu_core_num = 1;
static inline int cluster_id() { return tj_emu_cluster_id; }
static inline int core_id() { return tj_emu_core_id; }
static inline int cluster_num() { return tj_emu_cluster_num; }
static inline int core_num() { return tj_emu_core_num; }
static inline void sync_cluster() {}   // this slice emits no cluster-level sync

// ---- error flag: the first error wins, the launcher turns it into a Python exception ---------
static std::atomic<int> tj_emu_err(0);
static char tj_emu_msg[512];
static void tj_emu_fail(const char* fmt, const char* what, uint64_t a, uint64_t b) {
    int expected = 0;
    if (tj_emu_err.compare_exchange_strong(expected, 1))
        snprintf(tj_emu_msg, sizeof tj_emu_msg, fmt, what, (unsigned long long)a, (unsigned long long)b,
                 tj_emu_cluster_id, tj_emu_core_id);
}

// ---- global-memory regions registered by the launcher ---------------------------------------
#define TJ_EMU_MAX_REGIONS 64
static int tj_emu_nregions = 0;
static uint64_t tj_emu_lo[TJ_EMU_MAX_REGIONS], tj_emu_hi[TJ_EMU_MAX_REGIONS];
static inline bool tj_emu_in_gm(const void* p, int bytes) {
    uint64_t a = (uint64_t)(uintptr_t)p, b = a + (uint64_t)(bytes < 0 ? 0 : bytes);
    for (int i = 0; i < tj_emu_nregions; ++i)
        if (a >= tj_emu_lo[i] && b <= tj_emu_hi[i]) return true;
    return false;
}
// ---- the fence rules (targets/kunlun/plan/fences.py), checked per 4-byte granule of the arena ----
// Each granule remembers the accesses no fence has ordered yet: vector reads/writes (racing scalar
// code until mfence_lm, DMA until mfence) and scalar accesses (TJ_LM_SCALAR, racing vectors).
// An access that meets a pending one of another unit it races is an emulation error.
enum { TJ_PV_W = 1, TJ_PV_R = 2, TJ_PS = 4, TJ_PV_W_DMA = 8, TJ_PV_R_DMA = 16 };
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
    for (long g = off / 4; g < (end + 3) / 4; ++g)
        if (tj_emu_pend[g] & races) {
            tj_emu_fail("%s: arena bytes %llu..%llu are still pending from another unit, with no fence between "
                        "(cluster %d, core %d)", what, (uint64_t)(4 * g), (uint64_t)(4 * g + 3));
            return;
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
        tj_emu_fail("%s: GM address 0x%llx (+%llu bytes) is outside every tensor passed to the kernel "
                    "(cluster %d, core %d)", "GM2LM", (uint64_t)(uintptr_t)src, (uint64_t)bytes);
        return;
    }
    memcpy(dst, src, bytes);
}
static inline void LM2GM(const void* src, void* dst, int bytes) {
    tj_emu_order(src, bytes, TJ_PV_W_DMA, 0, "LM2GM of LM written by vector stores");
    if (!tj_emu_in_gm(dst, bytes)) {
        tj_emu_fail("%s: GM address 0x%llx (+%llu bytes) is outside every tensor passed to the kernel "
                    "(cluster %d, core %d)", "LM2GM", (uint64_t)(uintptr_t)dst, (uint64_t)bytes);
        return;
    }
    memcpy(dst, src, bytes);
}
#define GM2SM GM2LM
#define SM2GM LM2GM
#define GM2LM_ASYNC GM2LM
#define LM2GM_ASYNC LM2GM

// ---- 16-lane fp32 SIMD (xtdk_simd.h names); vector loads/stores need 64-byte aligned LM ----------
struct float32x16_t { float v[16]; };
static inline void tj_emu_check_simd(const void* p, const char* what) {
    if ((uintptr_t)p & 63) tj_emu_fail("%s: LM address 0x%llx is not 64-byte aligned (offset %llu; cluster %d, core %d)", what,
                                       (uint64_t)(uintptr_t)p, (uint64_t)((uintptr_t)p & 63));
}
static inline float32x16_t vload_lm_float32x16(const float* p) {
    tj_emu_check_simd(p, "vload_lm_float32x16");
    tj_emu_order(p, 64, TJ_PS, TJ_PV_R | TJ_PV_R_DMA, "vload_lm_float32x16 of LM scalar code touched");
    float32x16_t r; memcpy(r.v, p, sizeof r.v); return r;
}
static inline void vstore_lm_float32x16(float* p, float32x16_t x) {
    tj_emu_check_simd(p, "vstore_lm_float32x16");
    tj_emu_order(p, 64, TJ_PS, TJ_PV_W | TJ_PV_W_DMA, "vstore_lm_float32x16 over LM scalar code touched");
    memcpy(p, x.v, sizeof x.v);
}
#define TJ_EMU_VV(NAME, EXPR) \
    static inline float32x16_t NAME(float32x16_t a, float32x16_t b) { \
        float32x16_t r; for (int i = 0; i < 16; ++i) r.v[i] = (EXPR); return r; }
TJ_EMU_VV(vvadd_float32x16, a.v[i] + b.v[i])
TJ_EMU_VV(vvmul_float32x16, a.v[i] * b.v[i])
TJ_EMU_VV(vvmax_float32x16, a.v[i] > b.v[i] ? a.v[i] : b.v[i])
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

// ---- launch -----------------------------------------------------------------------------------
static int tj_emu_launch(int clusters, int cores, const std::function<void()>& kernel) {
    tj_emu_cluster_num = clusters;
    tj_emu_core_num = cores;
    const int total = clusters * cores;
#pragma omp parallel for schedule(static)
    for (int flat = 0; flat < total; ++flat) {
        tj_emu_cluster_id = flat / cores;
        tj_emu_core_id = flat % cores;
        tj_emu_lm_live = 0;
        if (!tj_emu_err.load(std::memory_order_relaxed)) kernel();
    }
    return tj_emu_err.load() ? -1 : 0;
}

extern "C" void tj_emu_set_regions(int n, const uint64_t* lo, const uint64_t* hi) {
    tj_emu_nregions = n < TJ_EMU_MAX_REGIONS ? n : TJ_EMU_MAX_REGIONS;
    for (int i = 0; i < tj_emu_nregions; ++i) { tj_emu_lo[i] = lo[i]; tj_emu_hi[i] = hi[i]; }
    tj_emu_err.store(0);
    tj_emu_msg[0] = 0;
}
extern "C" const char* tj_emu_error() { return tj_emu_msg; }
