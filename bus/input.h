/*
 * input.h - counters for an application's input that is not a tickbus
 * stream (bus/input.c; the public calls are tb_input_* in tickbus.h).
 *
 * A feed handler reads the exchange's lines A and B; a tool that watches
 * the process (tb-stat) should see them beside its streams.  An input is
 * a slot of the process's counters file (counters.h) like a subscriber's:
 * role subscriber, its name where a stream's name goes, its kind (e.g.
 * "mold") where the transport goes, and counted into the same counters a
 * subscriber uses - delivered, duplicates, gaps, errors, malformed - so
 * tb-stat shows it with no change.  No definition here beyond the struct:
 * the calls are declared in tickbus.h.
 */
#ifndef TB_INPUT_H
#define TB_INPUT_H

#include <tickbus/tickbus.h>

#include "bus/counters.h"

struct tb_input {
	tb_counter_slot_t *ctr;  /* in the counters file, or `own` */
	tb_counter_slot_t own;
};

#endif
