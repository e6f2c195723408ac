/*
 * thread.h - pinning hot threads to cores, the CPU-list format, and the idle
 * strategies a polling thread runs between polls.
 *
 * tb_thread_pin() and tb_idle_init()/tb_idle_step() are public (tickbus.h);
 * this header adds what the library and the tests need around them.
 *
 * Threads: tb_thread_pin pins the calling thread.  A tb_idle_t belongs to
 * the one thread that polls with it.
 */
#ifndef TB_THREAD_H
#define TB_THREAD_H

#include <tickbus/tickbus.h>

#include <sched.h>

/* Where the kernel lists isolated cores; $TICKBUS_ISOLATED_FILE overrides
 * it (tests point it at a file of their own). */
#define TB_THREAD_ISOLATED_FILE "/sys/devices/system/cpu/isolated"

/* Defaults of tb_idle_init, in idle steps (one step per empty poll) and ns.
 * 100 spins keep a thread hot for a few microseconds of silence; 100 more
 * steps of sched_yield let a co-scheduled process in (2-core machines);
 * backoff sleeps then double from 1 us to 1 ms, which bounds the wake-up
 * delay of an idle subscriber at 1 ms. */
#define TB_IDLE_SPIN_MAX 100u
#define TB_IDLE_YIELD_MAX 200u
#define TB_IDLE_SLEEP_MIN_NS 1000u
#define TB_IDLE_SLEEP_MAX_NS 1000000u

/*
 * Parses a kernel CPU list such as "0-3,8,10-11" (the format of
 * /sys/devices/system/cpu/{online,isolated}) into `set`.  Blanks around
 * items and a trailing newline are allowed; an empty list is an empty set.
 * Returns the number of CPUs in the set, or TB_EINVAL with a message naming
 * the offending text (bad number, reversed range, CPU >= CPU_SETSIZE, empty
 * item).  `set` is left empty on error.
 */
int tb_thread_cpulist_parse(const char *list, cpu_set_t *set);

/* Whether `core` is listed in the isolated-cores file: 1 yes, 0 no, or a
 * negative TB_E* code when the file cannot be read. */
int tb_thread_core_isolated(int core);

#endif
