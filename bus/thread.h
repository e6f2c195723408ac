/*
 * thread.h - pinning hot threads to cores, and the CPU-list format.
 *
 * tb_thread_pin() is public (tickbus.h); this header adds what the library
 * and the tests need around it.  The idle strategies a polling thread runs
 * between polls are bus/idle.h.
 *
 * Threads: tb_thread_pin pins the calling thread; the rest may be called
 * from any thread.
 */
#ifndef TB_THREAD_H
#define TB_THREAD_H

#include <tickbus/tickbus.h>

#include <pthread.h>
#include <sched.h>

/* Where the kernel lists isolated cores; $TICKBUS_ISOLATED_FILE overrides
 * it (tests point it at a file of their own). */
#define TB_THREAD_ISOLATED_FILE "/sys/devices/system/cpu/isolated"

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

/*
 * Starts one of the library's helper threads (control, heartbeat,
 * recovery, a service's connections: threads that sleep in the kernel and
 * wake now and then), named `name` (at most 15 characters, for top -H and
 * perf), off the hot threads' cores: on the CPUs the process had before
 * its first tb_thread_pin, less every core pinned since; a later pin
 * moves it off that core too, while it runs.  With no pin yet, or none of
 * those CPUs left, it inherits the caller's affinity (and keeps it while
 * no CPU is left).
 * Returns 0, or TB_ESYS (pthread_create) with a message naming `name`.
 */
int tb_thread_start(pthread_t *t, const char *name, void *(*fn)(void *),
		    void *arg);

/* The CPUs tb_thread_start gives a helper now, into `set`; returns how
 * many (0: it inherits the caller's). */
int tb_thread_helper_cpus(cpu_set_t *set);

#endif
