/*
 * clock.h - wall-clock nanoseconds from the invariant TSC.
 *
 * tb_clock_now_ns_inline() is the hot-path clock: one rdtsc, one 128-bit
 * multiply and a shift, no system call, no division.  Its result is on the
 * CLOCK_REALTIME epoch and is comparable across all processes of one host,
 * because they all use the same calibration (see clock.c for the shared
 * calibration file and the drift bound).
 *
 * Where the TSC is not invariant, or TICKBUS_CLOCK=gettime is set, the clock
 * falls back to clock_gettime(CLOCK_REALTIME) and tb_clock_source() says
 * "gettime".
 *
 * Threads: every function may be called from any thread.  Initialisation is
 * lazy (the first call) or explicit (tb_clock_init(), which a program should
 * call at start-up so that the ~15 ms calibration never lands on a hot path).
 */
#ifndef TB_CLOCK_H
#define TB_CLOCK_H

#include "bus/barrier.h"
#include <tickbus/tickbus.h>

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TB_CLOCK_HAVE_TSC 1
#else
#define TB_CLOCK_HAVE_TSC 0
#endif

/* Default shared calibration file; TICKBUS_CLOCK_FILE overrides it. */
#define TB_CLOCK_FILE_DEFAULT "/dev/shm/tickbus.clock"

enum tb_clock_mode {
	TB_CLOCK_MODE_UNINIT = 0,
	TB_CLOCK_MODE_TSC = 1,     /* calibrated invariant TSC */
	TB_CLOCK_MODE_GETTIME = 2, /* clock_gettime(CLOCK_REALTIME) */
};

/* The fixed-point shift of every calibration: a constant, so that the hot
 * path's conversion is a multiply and one fixed shift. */
#define TB_CLOCK_SHIFT 32

/*
 * One calibration: ns = base_ns + ((tsc - base_tsc) * mult) >> shift, shift
 * always TB_CLOCK_SHIFT.
 * The difference is taken as signed, so a TSC read a few ticks before
 * base_tsc (another core, right after calibration) still converts sanely.
 */
typedef struct tb_clock_calib {
	uint64_t base_tsc; /* TSC at the reference point */
	uint64_t base_ns;  /* CLOCK_REALTIME ns at the same point */
	uint64_t mult;     /* ns per tick, fixed point with `shift` bits */
	uint32_t shift;
	uint32_t pad_;
	uint64_t tsc_hz;   /* informational: measured tick rate */
} tb_clock_calib_t;

/* The process-wide clock state.  `mode` is stored with release after `cal`
 * is filled (R1 in clock_setup), and loaded with acquire (A1 below). */
typedef struct tb_clock_state {
	_Atomic uint32_t mode;
	int from_file;     /* 1: calibration reused from the shared file */
	tb_clock_calib_t cal;
} tb_clock_state_t;

extern tb_clock_state_t tb_clock_state_;

/* Raw TSC (0 where there is none).  Not serialising: it may execute a few
 * instructions early, which is far below what a timestamp resolves.  Hot
 * path: no system call. */
static inline uint64_t tb_clock_tsc(void)
{
#if TB_CLOCK_HAVE_TSC
	return __rdtsc();
#else
	return 0;
#endif
}

/* Converts with an explicit calibration.  Hot path. */
static inline uint64_t tb_clock_calib_to_ns(const tb_clock_calib_t *c,
					    uint64_t tsc)
{
	int64_t d = (int64_t)(tsc - c->base_tsc);
	__int128 off = ((__int128)d * (__int128)c->mult) >> TB_CLOCK_SHIFT;

	return c->base_ns + (uint64_t)(int64_t)off;
}

/* Converts a tb_clock_tsc() value to CLOCK_REALTIME ns with the process
 * calibration.  Meaningful once the clock is initialised; in gettime mode it
 * uses a private rate calibration (good for durations, not for comparing
 * processes).  Hot path. */
static inline uint64_t tb_clock_tsc_to_ns(uint64_t tsc)
{
	return tb_clock_calib_to_ns(&tb_clock_state_.cal, tsc);
}

/*
 * A calibration moved forward for a hot path that keeps its own copy (the
 * publisher's offer): its base is 2^TB_CLOCK_SHIFT ticks earlier (about a
 * second), so the difference from it is never negative for a TSC read
 * after calibration, even on another core a few ticks behind, and the
 * conversion needs no sign fix-up: one unsigned multiply, a shift, an add.
 * Exactly tb_clock_calib_to_ns's result for every TSC from
 * base_tsc - 2^TB_CLOCK_SHIFT on, because moving the base by
 * 2^TB_CLOCK_SHIFT ticks moves the product by exactly mult ns.
 */
typedef struct tb_clock_fwd {
	uint64_t base_tsc;
	uint64_t base_ns;
	uint64_t mult;
} tb_clock_fwd_t;

static inline void tb_clock_fwd_init(tb_clock_fwd_t *f,
				     const tb_clock_calib_t *c)
{
	f->base_tsc = c->base_tsc - (UINT64_C(1) << TB_CLOCK_SHIFT);
	f->base_ns = c->base_ns - c->mult;
	f->mult = c->mult;
}

/* Hot path: tb_clock_calib_to_ns of the calibration `f` was made from. */
static inline uint64_t tb_clock_fwd_to_ns(const tb_clock_fwd_t *f,
					  uint64_t tsc)
{
	unsigned __int128 p = (unsigned __int128)(tsc - f->base_tsc) * f->mult;

	return f->base_ns + (uint64_t)(p >> TB_CLOCK_SHIFT);
}

/* Out-of-line path: initialises on first use, or serves gettime mode. */
uint64_t tb_clock_now_ns_slow(void);

/* Nanoseconds on the CLOCK_REALTIME epoch.  Hot path: no system call, no
 * lock, one predictable branch (the mode check). */
static inline uint64_t tb_clock_now_ns_inline(void)
{
	/* A1 pairs with R1 in clock_setup: cal is complete once mode is TSC. */
	if (tb_likely(tb_atomic_load_acquire(&tb_clock_state_.mode) ==
		      TB_CLOCK_MODE_TSC))
		return tb_clock_tsc_to_ns(tb_clock_tsc());
	return tb_clock_now_ns_slow();
}

/* Initialises the clock once per process (later calls return at once):
 * chooses the source, then loads or creates the shared calibration.
 * Always succeeds (falls back to gettime); returns 0. */
int tb_clock_init(void);

/* "tsc" or "gettime" (initialises the clock if needed). */
const char *tb_clock_source(void);

/* 1 when the CPU has an invariant TSC (CPUID 0x80000007 EDX bit 8, or the
 * kernel's constant_tsc + nonstop_tsc flags), else 0. */
int tb_clock_tsc_invariant(void);

/* Measures a fresh calibration: the tick rate against CLOCK_MONOTONIC_RAW
 * over `window_ns` (0 = the default, 15 ms), the offset against
 * CLOCK_REALTIME.  Returns 0 or TB_ENOTSUP (no TSC) / TB_ESYS. */
int tb_clock_calibrate(tb_clock_calib_t *cal, uint64_t window_ns);

/* The shared-file protocol: under an exclusive lock on `path`, reuses its
 * calibration when the magic, version, boot id and fields check out,
 * otherwise calibrates and replaces it atomically (temp file + rename).
 * `*created` says which happened.  Returns 0 or a TB_E* code with a message;
 * on error `cal` is not set. */
int tb_clock_load_or_create(const char *path, tb_clock_calib_t *cal,
			    int *created);

/* Copies the process calibration (initialising if needed); returns the
 * mode, and whether it came from the shared file in `*from_file`. */
int tb_clock_get(tb_clock_calib_t *cal, int *from_file);

/* --------------------------------------------------- the system's clocks
 * tb_clock_mono_ns / tb_clock_mono_ms (tickbus.h) and these two are the
 * library's one home for clock_gettime: every other file asks here. */

/*
 * CLOCK_MONOTONIC_COARSE in ns: the monotonic clock at the kernel tick's
 * resolution (1-4 ms), read from the vDSO without reading the clock source,
 * a few ns where tb_clock_mono_ns costs some 20.  For interval checks on a
 * hot path that tolerate a tick of error (the retransmit store's
 * sync_interval_ms, checked at every append); never for measuring.
 */
uint64_t tb_clock_mono_coarse_ns(void);

/*
 * CLOCK_REALTIME in ns from clock_gettime: the wall time the kernel and the
 * file system keep (file mtimes, epochs, the counters file's start time),
 * as opposed to tb_clock_now_ns, the TSC, which follows it only within the
 * calibration's drift.  A vDSO call; not for the hot path.
 */
uint64_t tb_clock_realtime_ns(void);

#endif
