/*
 * hist_recorder.c - the lock-free interval recorder (tb_hist_recorder_*):
 * one hot thread records into a histogram while another takes interval
 * snapshots of it, and the hot thread never waits.
 *
 * The recorder holds two histograms, `active` (recorded into) and
 * `inactive` (empty, owned by the sampler), and an `epoch` that only the
 * recording thread writes: odd while it is inside a record call, even
 * outside.  A sample:
 *   X1  exchange `active` with the empty histogram;
 *   A1  load the epoch; if it is odd, a record call is in flight and may have
 *       loaded the old pointer before X1;
 *   A2  wait until the epoch moves past that odd value;
 * after which no record call can touch the old histogram: any call entered
 * after A1 loads `active` after X1 in the single total order of seq-cst
 * operations (S1 < L1 in the recorder, X1 < A1 here: if L1 read the old
 * pointer then L1 < X1, so S1 < A1 and A1 sees that odd epoch or a later
 * one).  The release store R1 that ends each record call pairs with A1 or
 * A2, so the sampler sees every count the old histogram received; the
 * exchange X1 pairs with L1, so the recorder sees the reset the sampler did
 * before publishing a histogram.  The counts themselves need no
 * read-modify-write, since only the recording thread writes them while they
 * are active.  The cost on the hot path is one locked store (S1).
 *
 * The recording side (S1, L1, R1) is inline in hist.h, which as a public
 * header spells its atomics with the __atomic builtins; the sampling side
 * is here, through barrier.h's operations on plain objects.
 */
#include <tickbus/hist.h>

#include "bus/barrier.h"
#include "bus/error.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Busy-wait rounds before the sampler starts yielding the core: a record
 * call lasts a few ns, so 100 pauses (~1-10 us) cover it unless the
 * recording thread was preempted, when only yielding helps. */
#define RECORDER_SPIN_MAX 100

int tb_hist_recorder_init(tb_hist_recorder_t **rec, int64_t lowest_discernible,
			  int64_t highest_trackable, int significant_digits)
{
	tb_hist_recorder_t *r;
	int rc;

	if (!rec)
		return tb_error_set(TB_EINVAL, "hist_recorder_init: NULL result "
				  "pointer");
	*rec = NULL;
	if (posix_memalign((void **)&r, TB_CACHE_LINE, sizeof(*r)))
		return tb_error_set(TB_ENOMEM, "hist_recorder_init: out of "
				  "memory");
	memset(r, 0, sizeof(*r));
	rc = tb_hist_init(&r->active, lowest_discernible, highest_trackable,
			  significant_digits);
	if (!rc)
		rc = tb_hist_init(&r->inactive, lowest_discernible,
				  highest_trackable, significant_digits);
	if (rc) {
		tb_hist_recorder_free(r);
		return rc;
	}
	*rec = r;
	return 0;
}

void tb_hist_recorder_free(tb_hist_recorder_t *rec)
{
	if (!rec)
		return;
	tb_hist_free(rec->active);
	tb_hist_free(rec->inactive);
	free(rec);
}

int tb_hist_recorder_sample(tb_hist_recorder_t *rec, tb_hist_t *out)
{
	tb_hist_t *old;
	uint64_t e;
	int rounds = 0;

	if (!rec || !out)
		return tb_error_set(TB_EINVAL, "hist_recorder_sample: NULL "
				  "argument");
	/* X1: publish the empty histogram (reset before, so the recorder's L1
	 * sees it empty); take back the one being recorded into.  Pairs with
	 * L1 in tb_hist_recorder_record_n (hist.h). */
	old = tb_atomic_plain_exchange_seq_cst(&rec->active, rec->inactive);
	/* A1: pairs with R1 (and S1) in tb_hist_recorder_record_n.  Seq-cst
	 * so that it is ordered after X1 against the recorder's S1/L1. */
	e = tb_atomic_plain_load_seq_cst(&rec->epoch);
	if (e & 1) {
		/* A2: pairs with R1 in tb_hist_recorder_record_n: the call in
		 * flight may hold `old`. */
		while (tb_atomic_plain_load_acquire(&rec->epoch) == e) {
			if (rounds < RECORDER_SPIN_MAX) {
				rounds++;
				tb_cpu_relax();
			} else {
				sched_yield();
			}
		}
	}
	/* `old` is ours now: no record call can reach it until X1 of the
	 * next sample. */
	tb_hist_reset(out);
	tb_hist_merge(out, old);
	tb_hist_reset(old);
	rec->inactive = old;
	return 0;
}
