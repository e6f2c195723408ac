/*
 * barrier.h - the named memory-ordering operations tickbus uses.
 *
 * All cross-thread and cross-process synchronisation goes through these
 * wrappers around C11 atomics, never through `volatile`.  Each acquire in the
 * code carries a label naming the release it pairs with ("A1 pairs with R1 in
 * tb_ring_commit"), so a reader can check every edge.
 *
 * On x86-64 acquire loads and release stores compile to plain moves; the
 * wrappers cost nothing there but keep the compiler honest and the code
 * portable to weaker machines.
 */
#ifndef TB_BARRIER_H
#define TB_BARRIER_H

#include <stdatomic.h>
#include <stdint.h>

#define tb_likely(x)   __builtin_expect(!!(x), 1)
#define tb_unlikely(x) __builtin_expect(!!(x), 0)

#define TB_CACHE_LINE 64
#define tb_cache_aligned __attribute__((aligned(TB_CACHE_LINE)))

/* Load that later loads and stores of this thread cannot move above. */
#define tb_atomic_load_acquire(p)      atomic_load_explicit((p), memory_order_acquire)
/* Store that earlier loads and stores of this thread cannot move below. */
#define tb_atomic_store_release(p, v)  atomic_store_explicit((p), (v), memory_order_release)
/* Unordered atomic access (no tearing, no ordering). */
#define tb_atomic_load_relaxed(p)      atomic_load_explicit((p), memory_order_relaxed)
#define tb_atomic_store_relaxed(p, v)  atomic_store_explicit((p), (v), memory_order_relaxed)
#define tb_atomic_fetch_add_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)

/* Fences: order plain data accesses against an atomic flag (seqlock-style). */
#define tb_atomic_fence_acquire()  atomic_thread_fence(memory_order_acquire)
#define tb_atomic_fence_release()  atomic_thread_fence(memory_order_release)
#define tb_atomic_fence_full()     atomic_thread_fence(memory_order_seq_cst)

/* Tells the CPU this is a spin-wait loop (PAUSE on x86). */
static inline void tb_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

#endif
