/*
 * latency.h - a latency the application measures, exported as a histogram
 * of the process's counters file (bus/latency.c; the public calls are
 * tb_latency_* in tickbus.h).
 *
 * A strategy knows latencies the bus cannot see - the time from a
 * publisher's stamp to its own handler, from a tick to its order - and
 * the people who watch it want them where they watch everything else:
 * tb-stat, and Prometheus through it.  A tb_latency_t is one histogram
 * record of the counters file (counters.h: buckets of powers of two,
 * recorded with relaxed stores by the one owner thread), or, when the
 * file has no room, one of its own that no tool sees.  No definition here
 * beyond the struct: the calls are declared in tickbus.h.
 */
#ifndef TB_LATENCY_H
#define TB_LATENCY_H

#include <tickbus/tickbus.h>

#include "bus/counters.h"

struct tb_latency {
	tb_counter_hist_t *h;    /* in the counters file, or `own` */
	tb_counter_hist_t own;
};

#endif
