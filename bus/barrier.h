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

/* Sequentially consistent access: for flags whose every reader and writer
 * must agree on one order (stop flags, states a control thread and a hot
 * thread both change).  Use acquire/release where one edge is enough. */
#define tb_atomic_load_seq_cst(p)      atomic_load_explicit((p), memory_order_seq_cst)
#define tb_atomic_store_seq_cst(p, v)  atomic_store_explicit((p), (v), memory_order_seq_cst)
/* Read-modify-write with the ordering in the name. */
#define tb_atomic_fetch_add_release(p, v) \
	atomic_fetch_add_explicit((p), (v), memory_order_release)
#define tb_atomic_fetch_add_acq_rel(p, v) \
	atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
#define tb_atomic_exchange_acq_rel(p, v) \
	atomic_exchange_explicit((p), (v), memory_order_acq_rel)
#define tb_atomic_exchange_seq_cst(p, v) \
	atomic_exchange_explicit((p), (v), memory_order_seq_cst)
/* Compare-and-swap: 1 when *p held *expected and now holds v; else 0 with
 * *expected updated to what *p held. */
#define tb_atomic_cas_acq_rel(p, expected, v) \
	atomic_compare_exchange_strong_explicit((p), (expected), (v), \
		memory_order_acq_rel, memory_order_acquire)

/*
 * The same operations on plain (not _Atomic) objects, for layouts that a
 * public header or C++ must see as ordinary integers (the histogram's
 * counts).  GCC and Clang's __atomic builtins; same meanings as above.
 */
#define tb_atomic_plain_load_relaxed(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define tb_atomic_plain_load_acquire(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tb_atomic_plain_load_seq_cst(p)     __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define tb_atomic_plain_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define tb_atomic_plain_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define tb_atomic_plain_fetch_add_relaxed(p, v) \
	__atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define tb_atomic_plain_fetch_add_release(p, v) \
	__atomic_fetch_add((p), (v), __ATOMIC_RELEASE)
#define tb_atomic_plain_exchange_seq_cst(p, v) \
	__atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)

/* Fences: order plain data accesses against an atomic flag (seqlock-style). */
#define tb_atomic_fence_acquire()  atomic_thread_fence(memory_order_acquire)
#define tb_atomic_fence_release()  atomic_thread_fence(memory_order_release)
#define tb_atomic_fence_full()     atomic_thread_fence(memory_order_seq_cst)
/* Compiler-only: keeps this thread's accesses in program order, for the
 * side of an asymmetric fence whose other side is membarrier(2), which
 * makes every running thread of the process execute a full fence. */
#define tb_atomic_fence_compiler() atomic_signal_fence(memory_order_seq_cst)

/*
 * Adds 1 to a counter only this thread stores and other threads only read
 * (a seqlock's or a reader mark's own count), with release order: this
 * thread's earlier accesses stay above it, and the compiler moves none of
 * its later ones above it either.  On x86-64 one add to memory: a single
 * aligned store, so a reader sees the old value or the new, never a torn
 * one, and no lock prefix, which no other writer makes necessary.  C11
 * has no such operation (its fetch_add is a locked read-modify-write), so
 * elsewhere it is the relaxed load and the release store it stands for.
 */
static inline void tb_atomic_own_inc_release(_Atomic uint64_t *p)
{
#if defined(__x86_64__)
	/* Stores are released in program order on x86-64; the clobber keeps
	 * the compiler's order on both sides. */
	__asm__ __volatile__("addq $1, %0" : "+m"(*(uint64_t *)p) : : "memory");
#else
	atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + 1,
			      memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

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
