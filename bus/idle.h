/*
 * idle.h - the idle strategies a polling thread runs between polls.
 *
 * tb_idle_t, tb_idle_init() and tb_idle_step() are public (tickbus.h); this
 * header adds the defaults the library and the tests need around them.
 *
 * Threads: a tb_idle_t belongs to the one thread that polls with it.
 */
#ifndef TB_IDLE_H
#define TB_IDLE_H

#include <tickbus/tickbus.h>

/* Defaults of tb_idle_init, in idle steps (one step per empty poll) and ns.
 * 100 spins keep a thread hot for a few microseconds of silence; 100 more
 * steps of sched_yield let a co-scheduled process in (2-core machines);
 * backoff sleeps then double from 1 us to 1 ms, which bounds the wake-up
 * delay of an idle subscriber at 1 ms. */
#define TB_IDLE_SPIN_MAX 100u
#define TB_IDLE_YIELD_MAX 200u
#define TB_IDLE_SLEEP_MIN_NS 1000u
#define TB_IDLE_SLEEP_MAX_NS 1000000u

#endif
