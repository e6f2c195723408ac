/*
 * tb-feedcheck - reads a MoldUDP64/ITCH feed with the feed-handler core
 * (tools/md/feed.c) until the end of session, and prints what it saw: the
 * counters, the events by kind, and the order-state checksum of its books,
 * to compare with tb-feedsim's own.  It also keeps the top of book from the
 * TOP events and checks it against the books at the end (top_mismatch),
 * and records, per book event, the time from the receive of the packet
 * that carried the message to the callback (the feed handler's own hop:
 * decode, book update, event; for a message that waited in a gap, the wait
 * too), printed as recv_to_event_p50/p99/p999/max in ns.
 *
 * With line B (--group-b) it reads both lines, arbitrated (feed.h), and
 * reports each: what it won and lost and how late it was, and when it fell
 * silent or came back (a line on stderr as it happens).
 *
 * Summary line (stdout), parsed by the scenario tests:
 *   feedcheck: ended=0|1 messages=N packets=P ... orders=O checksum=0x...
 *     requested=N requested_new=N lines=1|2 a_packets=N a_won=N a_lost=N a_late_packets=N
 *     a_late_avg_ns=N a_late_max_ns=N a_silences=N (and b_...)
 */
#include <tickbus/tickbus.h>
#include <tickbus/hist.h>
#include "tools/cli.h"
#include "tools/md/feed.h"
#include "tools/md/feed_opts.h"
#include "tools/md/md_error.h"

#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char prog[] = "tb-feedcheck";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-feedcheck [options]\n"
"Reads a MoldUDP64/ITCH feed until the end of session and prints a summary.\n"
"options:\n");
	tb_feed_opts_usage(out);
	fprintf(out,
"      --timeout-ms MS      give up after this long (default 60000)\n"
"  -h, --help               this text\n"
"exit status: 0 end of session reached, 1 timeout or error, 2 usage\n");
}

typedef struct check {
	uint64_t ev[5];
	int64_t top[TB_FEED_OPTS_MAX_INSTRUMENTS][4];
	int have_top[TB_FEED_OPTS_MAX_INSTRUMENTS];
	uint64_t recv_zero;
	tb_hist_t *lat;
} check_t;

static void on_event(void *ctx, const tb_feed_event_t *ev)
{
	check_t *c = ctx;

	if (ev->kind < 5)
		c->ev[ev->kind]++;
	if (ev->kind == TB_FEED_EV_BOOK && ev->feed_receive_ns == 0)
		c->recv_zero++;
	if (ev->kind == TB_FEED_EV_BOOK)
		tb_hist_record(c->lat, (int64_t)(tb_clock_now_ns() -
						 ev->feed_receive_ns));
	if (ev->kind == TB_FEED_EV_BOOK && ev->book.kind == TB_BOOK_EV_TOP &&
	    ev->instrument < TB_FEED_OPTS_MAX_INSTRUMENTS) {
		c->top[ev->instrument][0] = ev->book.bid_px;
		c->top[ev->instrument][1] = (int64_t)ev->book.bid_qty;
		c->top[ev->instrument][2] = ev->book.ask_px;
		c->top[ev->instrument][3] = (int64_t)ev->book.ask_qty;
		c->have_top[ev->instrument] = 1;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		TB_FEED_OPTS_LONG,
		{"timeout-ms", required_argument, 0, 'T'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	tb_feed_opts_t fo;
	tb_feed_t *f;
	tb_feed_stats_t st;
	static check_t chk;
	uint64_t timeout_ms = 60000, t0, idle = 0;
	uint64_t mismatch = 0, i;
	int c, rc, silent[TB_FEED_LINES] = {0, 0};

	tb_feed_opts_init(&fo);
	while ((c = getopt_long(argc, argv, TB_FEED_OPTS_SHORT "h", opts,
				NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'T': if (tb_cli_u64_c(optarg, &timeout_ms) || timeout_ms == 0) bad = "--timeout-ms"; break;
		case 'h': return tb_cli_usage_exit(usage, c);
		default:
			if (!tb_feed_opts_take(&fo, c, optarg, &bad))
				return tb_cli_usage_exit(usage, c);
			break;
		}
		if (bad)
			return tb_cli_bad_value(prog, NULL, bad, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);
	tb_feed_opts_done(&fo);
	fo.cfg.cb = on_event;
	fo.cfg.ctx = &chk;
	(void)tb_clock_now_ns(); /* calibrates now, not on the first packet */
	/* 1 ns to 100 s, 3 digits. */
	if (tb_hist_init(&chk.lat, 1, 100000000000ll, 3) != 0) {
		fprintf(stderr, "tb-feedcheck: %s\n", tb_errmsg());
		return 1;
	}
	rc = tb_feed_open(&f, &fo.cfg);
	if (rc) {
		fprintf(stderr, "tb-feedcheck: %s\n", tb_md_error_msg());
		tb_hist_free(chk.lat);
		return 1;
	}
	tb_cli_on_stop_signals(&stop);
	printf("feedcheck: ready port=%u\n", tb_feed_port(f));
	fflush(stdout);
	t0 = tb_clock_mono_ms();
	while (!stop && !tb_feed_ended(f) && tb_clock_mono_ms() - t0 < timeout_ms) {
		rc = tb_feed_poll(f);
		if (rc < 0) {
			fprintf(stderr, "tb-feedcheck: %s\n", tb_md_error_msg());
			break;
		}
		tb_feed_stats(f, &st);
		for (int l = 0; l < st.lines; l++)
			if (st.line[l].silent != silent[l]) {
				silent[l] = st.line[l].silent;
				fprintf(stderr, "tb-feedcheck: line %c %s at sequence "
					"%" PRIu64 "\n", 'A' + l, silent[l] ?
					"silent" : "back", st.next_seq);
			}
		/* Spin while data flows, then yield, then nap: a checker must not
		 * hog a shared core while the feed is idle. */
		if (rc > 0) {
			idle = 0;
		} else if (++idle > 1000) {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL);
		} else if (idle > 100) {
			sched_yield();
		}
	}
	tb_feed_stats(f, &st);
	for (i = 0; i < fo.cfg.max_instruments; i++) {
		tb_book_level_t b, a;
		int nb = tb_book_levels(tb_feed_book(f), (uint32_t)i, TB_BOOK_BID, &b, 1);
		int na = tb_book_levels(tb_feed_book(f), (uint32_t)i, TB_BOOK_ASK, &a, 1);
		int64_t want[4] = { nb ? b.price : 0, nb ? (int64_t)b.qty : 0,
				    na ? a.price : 0, na ? (int64_t)a.qty : 0 };

		if (!chk.have_top[i] && (nb || na))
			mismatch++;
		else if (chk.have_top[i] && memcmp(want, chk.top[i], sizeof(want)))
			mismatch++;
	}
	printf("feedcheck: ended=%d messages=%" PRIu64 " packets=%" PRIu64
	       " heartbeats=%" PRIu64 " duplicates=%" PRIu64
	       " malformed_packets=%" PRIu64 " malformed_messages=%" PRIu64
	       " unknown_types=%" PRIu64 " wrong_session=%" PRIu64
	       " gaps=%" PRIu64 " gaps_filled=%" PRIu64 " gaps_lost=%" PRIu64
	       " requests=%" PRIu64 " retrans_packets=%" PRIu64
	       " lost_messages=%" PRIu64 " stale_reports=%" PRIu64
	       " pending_dropped=%" PRIu64 " book_errors=%" PRIu64
	       " next_seq=%" PRIu64 " end_seq=%" PRIu64
	       " book_events=%" PRIu64 " instrument_events=%" PRIu64
	       " system_events=%" PRIu64 " top_mismatch=%" PRIu64
	       " recv_zero=%" PRIu64 " recv_to_event_count=%" PRId64
	       " recv_to_event_p50=%" PRId64 " recv_to_event_p99=%" PRId64
	       " recv_to_event_p999=%" PRId64 " recv_to_event_max=%" PRId64
	       " orders=%" PRIu64
	       " checksum=0x%016" PRIx64 "\n",
	       tb_feed_ended(f), st.messages, st.packets, st.heartbeats,
	       st.duplicates, st.malformed_packets, st.malformed_messages,
	       st.unknown_types, st.wrong_session, st.gaps, st.gaps_filled,
	       st.gaps_lost, st.requests, st.retrans_packets, st.lost_messages,
	       st.stale_reports, st.pending_dropped, st.book_errors,
	       st.next_seq, st.end_seq, chk.ev[TB_FEED_EV_BOOK],
	       chk.ev[TB_FEED_EV_INSTRUMENT], chk.ev[TB_FEED_EV_SYSTEM],
	       mismatch, chk.recv_zero, tb_hist_count(chk.lat),
	       tb_hist_value_at_percentile(chk.lat, 50.0),
	       tb_hist_value_at_percentile(chk.lat, 99.0),
	       tb_hist_value_at_percentile(chk.lat, 99.9),
	       tb_hist_max(chk.lat),
	       tb_book_order_count(tb_feed_book(f)),
	       tb_book_checksum(tb_feed_book(f), UINT32_MAX));
	printf("feedcheck: requested=%" PRIu64 " requested_new=%" PRIu64
	       " lines=%d", st.requested, st.requested_new, st.lines);
	for (int l = 0; l < st.lines; l++) {
		const tb_feed_line_stats_t *ls = &st.line[l];
		char x = (char)('a' + l);

		printf(" %c_packets=%" PRIu64 " %c_won=%" PRIu64 " %c_lost=%" PRIu64
		       " %c_late_packets=%" PRIu64 " %c_late_avg_ns=%" PRIu64
		       " %c_late_max_ns=%" PRIu64 " %c_silences=%" PRIu64, x,
		       ls->packets, x, ls->won, x, ls->lost, x, ls->late_packets,
		       x, ls->late_packets ? ls->late_ns_sum / ls->late_packets : 0,
		       x, ls->late_ns_max, x, ls->silences);
	}
	printf("\n");
	rc = tb_feed_ended(f) ? 0 : 1;
	tb_feed_close(f);
	tb_hist_free(chk.lat);
	return rc;
}
