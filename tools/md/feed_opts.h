/*
 * feed_opts.h - the command-line options that name a feed source, shared
 * by the programs that read one (tb-feedhandler, tb-feedcheck): where the
 * feed is (group, port, interface), where its retransmission server is,
 * which session and sequence to start from, how gaps are chased, and how
 * many instruments to keep books for.  What each option means is the
 * feed core's (feed.h); this module only turns their text into a
 * tb_feed_cfg_t, with the same defaults and limits in every program.
 *
 * Use: TB_FEED_OPTS_SHORT in the getopt string, TB_FEED_OPTS_LONG in the
 * long-option table, tb_feed_opts_take() in the switch's default case,
 * tb_feed_opts_usage() in the usage text, tb_feed_opts_done() after the
 * loop.  Their letters: g p i H R F S G Y N, and the values from
 * TB_FEED_OPT_FIRST on (long options only: line B and arbitration).
 *
 * Threads: set-up only, one thread.
 */
#ifndef TB_FEED_OPTS_H
#define TB_FEED_OPTS_H

#include "tools/md/feed.h"

#include <stdint.h>
#include <stdio.h>

/* The most instruments a program may ask for (--instruments): the
 * programs size their per-instrument tables by it. */
#define TB_FEED_OPTS_MAX_INSTRUMENTS 1024

#define TB_FEED_OPTS_SHORT "g:p:i:H:R:"

/* Values of the long-only options, clear of any letter. */
#define TB_FEED_OPT_FIRST 0x100
#define TB_FEED_OPT_GROUP_B (TB_FEED_OPT_FIRST + 0)
#define TB_FEED_OPT_PORT_B (TB_FEED_OPT_FIRST + 1)
#define TB_FEED_OPT_AB_WAIT (TB_FEED_OPT_FIRST + 2)
#define TB_FEED_OPT_LINE_TIMEOUT (TB_FEED_OPT_FIRST + 3)

/* Entries of a `struct option` table (<getopt.h>). */
#define TB_FEED_OPTS_LONG \
	{"group", required_argument, 0, 'g'}, \
	{"port", required_argument, 0, 'p'}, \
	{"iface", required_argument, 0, 'i'}, \
	{"retrans-host", required_argument, 0, 'H'}, \
	{"retrans-port", required_argument, 0, 'R'}, \
	{"first-seq", required_argument, 0, 'F'}, \
	{"session", required_argument, 0, 'S'}, \
	{"gap-timeout-ms", required_argument, 0, 'G'}, \
	{"gap-retries", required_argument, 0, 'Y'}, \
	{"instruments", required_argument, 0, 'N'}, \
	{"group-b", required_argument, 0, TB_FEED_OPT_GROUP_B}, \
	{"port-b", required_argument, 0, TB_FEED_OPT_PORT_B}, \
	{"ab-wait-us", required_argument, 0, TB_FEED_OPT_AB_WAIT}, \
	{"line-timeout-ms", required_argument, 0, TB_FEED_OPT_LINE_TIMEOUT}

typedef struct tb_feed_opts {
	tb_feed_cfg_t cfg;     /* what the options say, from tb_feed_cfg_init */
	uint64_t retrans_port; /* 0 = no retransmission server */
	uint64_t port_b;       /* 0 = line A's port */
} tb_feed_opts_t;

/* The defaults: group 239.194.7.1 port 31001 on any interface,
 * retransmission server 127.0.0.1:31002, first sequence 1, any session,
 * TB_FEED_OPTS_MAX_INSTRUMENTS instruments, the rest tb_feed_cfg_init's. */
void tb_feed_opts_init(tb_feed_opts_t *o);

/* Takes option `opt` with its argument `arg` when it is one of the feed
 * options: returns 1, with *bad set to the option's name when `arg` is not
 * a good value for it (and `o` unchanged), else left alone.  Returns 0 for
 * any other option. */
int tb_feed_opts_take(tb_feed_opts_t *o, int opt, const char *arg,
		      const char **bad);

/* Writes the options' lines of a usage text. */
void tb_feed_opts_usage(FILE *out);

/* After the last option: settles what depends on several of them
 * (retransmission port 0 means no server; line B's port defaults to line
 * A's).  `o->cfg` is then ready for
 * tb_feed_open() once the caller has set its callback. */
void tb_feed_opts_done(tb_feed_opts_t *o);

#endif
