/*
 * tb-strategy - the reference strategy: subscribes to a market-data stream
 * through the public C API, keeps the top of book per instrument, sends an
 * order to tb-gateway when its rule fires, and measures tick-to-trade hop by
 * hop.
 *
 * Top of book.  A Quote sets both sides of its instrument; a
 * BookLevelUpdate entry at level 0 (Add or Modify) sets that side, and a
 * level-0 Delete leaves the side unknown until the next Quote (the handler
 * sends one whenever the top changes).  Each Quote is checked against the
 * best levels the BookLevelUpdates before it left (level_checks,
 * level_mismatch): the two message kinds must tell the same book.
 *
 * The rule.  On a Quote with both sides present whose spread (ask - bid) is
 * at most --max-spread, buy at the ask, min(ask qty, --qty) shares, IOC -
 * at most one order per --min-interval-us and --max-orders in all.  The
 * order goes to tb-gateway as one UDP datagram (tools/md/gw.h; the
 * schema's Order/OrderAck carry the same stamps, but the gateway speaks its
 * own small format, so the strategy does too).
 *
 * Tick to trade, per order, from six timestamps of one host's clock
 * (tb_clock_now_ns, shared calibration):
 *   feed receive (the Quote's feedRecvTs) -> publish (the frame's
 *   publish_ns) -> subscriber receive (receive_ns, stamped by tb_sub_poll)
 *   -> decision (the rule fired) -> order sent (just before send()) ->
 *   gateway receive (the ack's arrival_ns)
 * Each hop and the whole (feed receive -> gateway receive) goes into an
 * HDR histogram (tickbus/hist.h) when the ack comes back; an order whose stamps
 * are not in that order is counted as `disorder` (and still recorded, a
 * negative hop as 0), and per hop as <hop>_negative with the most negative
 * value seen (<hop>_most_negative, ns): stamps taken in two processes on
 * two cores can read a little out of order where the cores' TSCs are not
 * in step (some virtual machines).  At the end: a table of p50/p99/p99.9/max per hop,
 * one .hgrm file per hop (--hgrm-dir), and what the stream lost.
 *
 * Loss.  TB_GAP, TB_LAPPED and TB_DATA_LOSS from tb_sub_poll are counted,
 * with their ranges from tb_sub_loss (the first 16 printed as they happen).
 * On a stream with recovery, gaps are filled before the poll returns them:
 * each recovery started is counted (recoveries=); replayed messages
 * (TB_MSG_F_REPLAY) update the book and are counted (replayed=) but never
 * fire an order, as their prices are stale.
 *
 * Books.  Every BookLevelUpdate entry is applied to a book of price levels
 * per instrument (lvbook.h); its checksum (book_checksum) is the one the
 * feed handler prints of its own books, so that the two can be compared.
 *
 * Sequences.  Each message's sequence is checked against the one before
 * (seq_errors: any that is not the next, loss reported or not); first_seq
 * and last_seq bound what was delivered; TB_NEW_EPOCH is counted (epochs).
 * On a stream taken from several sources (hot failover) nothing of the
 * sort should ever show when one feed handler dies.
 *
 * Late join from a snapshot (--snapshot STREAM): the strategy opens its
 * stream, then the snapshot stream, and joins at the first whole snapshot
 * (tb_sub_start_at_snapshot): SnapshotBegin clears the books, its
 * BookLevelUpdates rebuild them (and the top of book of each instrument it
 * names), and the stream is delivered from the snapshot's lastFeedSeq + 1,
 * what its transport no longer holds recovered.  It prints
 *   NAME: joined snapshot=S messages=N join_ms=T book_checksum=0x...
 * (the books as the snapshot left them), and the summary says
 * joined_at=S join_ms=T caught_up_ms=T (until the first poll with nothing
 * left to deliver).
 *
 * Stops when the stream closes (TB_CLOSED) or its publisher dies, on
 * SIGINT/SIGTERM, or after --timeout-ms; then waits up to --ack-wait-ms for
 * the acks still out.
 *
 * Summary line (stdout), parsed by the scenario tests and tools/demo.sh:
 *   strategy: name=S closed=0|1 messages=N quotes=N trades=N
 *     level_updates=N levels=N instruments=N statuses=N malformed=N
 *     unknown=N out_of_range=N orders=N send_errors=N acks=N bad_acks=N
 *     unmatched_acks=N disorder=N level_checks=N level_mismatch=N gaps=N
 *     gapped=N laps=N data_loss=N lost=N recoveries=N replayed=N
 *     top_checksum=0x... book_checksum=0x... first_seq=N last_seq=N
 *     seq_errors=N epochs=N deaths=N book_refused=N joined_at=S join_ms=T
 *     caught_up_ms=T
 * (gapped: messages in TB_GAP ranges - being recovered where the stream has
 * recovery, missing where it has none; lost: in TB_LAPPED and TB_DATA_LOSS
 * ranges, gone for good)
 * and one line of hop figures in ns:
 *   hops: feed_to_publish_count=N feed_to_publish_p50=N ... tick_to_trade_max=N
 *     feed_to_publish_negative=N feed_to_publish_most_negative=N ...
 */
#include <tickbus/hist.h>
#include <tickbus/tickbus.h>
#include "tickbus_schema.h"
#include "tools/cli.h"
#include "tools/md/gw.h"
#include "tools/md/lvbook.h"
#include "tools/md/md_top.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_INSTR 1024
#define PENDING 65536 /* orders in flight, power of two */
#define NHOPS 6

static const char *const hop_name[NHOPS] = {
	"feed_to_publish", "publish_to_receive", "receive_to_decision",
	"decision_to_send", "send_to_gateway", "tick_to_trade",
};

static const char prog[] = "tb-strategy";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-strategy -c CONFIG -s STREAM [options]\n"
"Keeps the top of book from a tickbus market-data stream, sends orders to\n"
"tb-gateway when the spread is tight, and reports tick-to-trade per hop.\n"
"options:\n"
"  -c, --config FILE         tickbus config file (required)\n"
"  -s, --stream NAME         stream to subscribe to (required)\n"
"  -g, --gateway ADDR:PORT   tb-gateway (default 127.0.0.1:31010)\n"
"  -n, --name NAME           name in the output and .hgrm files\n"
"                            (default strategy)\n"
"      --core N              pin the polling thread to core N\n"
"      --max-spread PRICE    fire when ask - bid <= PRICE (default 0.02)\n"
"      --qty N               shares per order at most (default 100)\n"
"      --min-interval-us US  at most one order per US (default 1000)\n"
"      --max-orders N        orders in all (default 1000000)\n"
"      --hgrm-dir DIR        write DIR/NAME.HOP.hgrm (default: none)\n"
"      --timeout-ms MS       stop after this long, 0 = never (default 0)\n"
"      --ack-wait-ms MS      wait for acks at the end (default 500)\n"
"      --snapshot STREAM     join late, from the first whole snapshot on\n"
"                            STREAM (published by tb-feedhandler --snapshot)\n"
"      --snapshot-wait-ms MS give up waiting for one after MS (default\n"
"                            30000)\n"
"  -h, --help                this text\n"
"exit status: 0 the stream closed or a signal stopped it, 1 error or\n"
"timeout, 2 usage\n");
}

typedef struct top {
	int64_t bid_px, ask_px;
	uint64_t bid_qty, ask_qty;
} top_t;

/* One side's best level as the BookLevelUpdates tell it. */
typedef struct side_top {
	int64_t px;
	uint64_t qty;
	int known; /* 0 after a level-0 Delete, until the next Quote */
} side_top_t;

typedef struct pending {
	uint64_t id;
	uint64_t ts[5]; /* feed receive, publish, receive, decision, sent */
} pending_t;

typedef struct strat {
	int fd;
	int64_t max_spread;
	uint64_t qty, min_interval_ns, max_orders;
	uint64_t last_order_ns, next_id;
	top_t top[MAX_INSTR];
	side_top_t lvl[MAX_INSTR][2]; /* bid, ask from BookLevelUpdate */
	uint64_t top_hash[MAX_INSTR];
	pending_t pend[PENDING];
	tb_hist_t *hop[NHOPS];
	uint64_t messages, replayed, recoveries;
	uint64_t quotes, trades, level_updates, levels, instruments;
	uint64_t statuses, malformed, unknown, out_of_range, orders, send_errors;
	uint64_t acks, bad_acks, unmatched_acks, disorder, outstanding;
	uint64_t level_checks, level_mismatch;
	tb_lvbook_t *book;
	uint64_t book_refused;
	uint64_t first_seq, last_seq, seq_errors;
	uint8_t in_snapshot[MAX_INSTR]; /* named by the snapshot being applied */
	uint64_t hop_disorder[NHOPS - 1]; /* orders whose hop i was negative */
	int64_t hop_min[NHOPS - 1];      /* most negative hop i seen */
} strat_t;

static void send_order(strat_t *s, const tb_msg_t *m, const tb_md_quote_t *q,
		       uint64_t decision)
{
	tb_gw_order_t o;
	pending_t *p;

	tb_gw_order_init(&o);
	o.order_id = ++s->next_id;
	o.price = q->ask_px.mantissa / TB_MD_TOP_PX_SCALE; /* gateway: exp -4 */
	o.qty = (uint32_t)(q->ask_qty < s->qty ? q->ask_qty : s->qty);
	o.instrument = q->instrument_id;
	o.side = 'B';
	p = &s->pend[o.order_id & (PENDING - 1)];
	p->id = o.order_id;
	p->ts[0] = q->feed_recv_ts;
	p->ts[1] = m->publish_ns;
	p->ts[2] = m->receive_ns;
	p->ts[3] = decision;
	o.sent_ns = p->ts[4] = tb_clock_now_ns();
	if (send(s->fd, &o, sizeof(o), MSG_DONTWAIT) != (ssize_t)sizeof(o)) {
		s->send_errors++;
		p->id = 0;
		return;
	}
	s->orders++;
	s->outstanding++;
	s->last_order_ns = decision;
}

static void on_quote(strat_t *s, const tb_msg_t *m)
{
	tb_md_quote_t q;
	top_t *t;

	if (tb_md_quote_decode(m->data, m->len, &q) < 0) {
		s->malformed++;
		return;
	}
	s->quotes++;
	if (q.instrument_id >= MAX_INSTR) {
		s->out_of_range++;
		return;
	}
	/* Cross-check: the best levels the BookLevelUpdates since the last
	 * Quote left must be this Quote's (the handler sends level events
	 * before the Quote of the same feed message). */
	{
		side_top_t *l = s->lvl[q.instrument_id];

		if (l[0].known) {
			s->level_checks++;
			if (l[0].px != q.bid_px.mantissa || l[0].qty != q.bid_qty)
				s->level_mismatch++;
		}
		if (l[1].known) {
			s->level_checks++;
			if (l[1].px != q.ask_px.mantissa || l[1].qty != q.ask_qty)
				s->level_mismatch++;
		}
		l[0] = (side_top_t){ q.bid_px.mantissa, q.bid_qty, 1 };
		l[1] = (side_top_t){ q.ask_px.mantissa, q.ask_qty, 1 };
	}
	t = &s->top[q.instrument_id];
	t->bid_px = q.bid_px.mantissa;
	t->bid_qty = q.bid_qty;
	t->ask_px = q.ask_px.mantissa;
	t->ask_qty = q.ask_qty;
	s->top_hash[q.instrument_id] =
		tb_md_top_hash(q.instrument_id, q.bid_px.mantissa, q.bid_qty,
			       q.ask_px.mantissa, q.ask_qty);
	/* A replayed quote is history: it brings the book up to date, but
	 * trading on it would be trading on a stale price. */
	if (m->flags & TB_MSG_F_REPLAY)
		return;
	/* The rule: a tight market, both sides present. */
	if (t->bid_px != TB_MD_PRICE_MANTISSA_NULL &&
	    t->ask_px != TB_MD_PRICE_MANTISSA_NULL &&
	    t->ask_qty != TB_MD_QUANTITY_NULL && t->ask_qty > 0 &&
	    t->ask_px - t->bid_px <= s->max_spread &&
	    s->orders < s->max_orders) {
		uint64_t now = tb_clock_now_ns();

		if (!s->last_order_ns || now - s->last_order_ns >= s->min_interval_ns)
			send_order(s, m, &q, now);
	}
}

static void on_levels(strat_t *s, const tb_msg_t *m)
{
	tb_md_book_level_update_t u;
	tb_md_book_level_update_groups_t g;
	tb_md_book_level_update_levels_entry_t e;

	if (tb_md_book_level_update_decode(m->data, m->len, &u, &g) < 0) {
		s->malformed++;
		return;
	}
	s->level_updates++;
	if (u.instrument_id >= MAX_INSTR) {
		s->out_of_range++;
		return;
	}
	while (tb_md_book_level_update_levels_next(&g.levels, &e)) {
		top_t *t = &s->top[u.instrument_id];
		int del = e.action == 2;

		s->levels++;
		if (tb_lvbook_apply(s->book, u.instrument_id, e.side - 1, e.action,
				    e.level, e.price.mantissa, e.qty,
				    e.order_count == TB_MD_COUNT_NULL ? 0 :
				    e.order_count) != 0)
			s->book_refused++;
		if (e.level != 0)
			continue;
		if (e.side == 1 || e.side == 2) {
			side_top_t *l = &s->lvl[u.instrument_id][e.side - 1];

			l->px = e.price.mantissa;
			l->qty = e.qty;
			l->known = !del;
		}
		if (e.side == 1) {
			t->bid_px = del ? TB_MD_PRICE_MANTISSA_NULL : e.price.mantissa;
			t->bid_qty = del ? TB_MD_QUANTITY_NULL : e.qty;
		} else if (e.side == 2) {
			t->ask_px = del ? TB_MD_PRICE_MANTISSA_NULL : e.price.mantissa;
			t->ask_qty = del ? TB_MD_QUANTITY_NULL : e.qty;
		}
	}
}

static void on_msg(void *ctx, const tb_msg_t *m)
{
	strat_t *s = ctx;

	if (s->last_seq && m->seq != s->last_seq + 1)
		s->seq_errors++;
	if (!s->first_seq)
		s->first_seq = m->seq;
	s->last_seq = m->seq;
	s->messages++;
	if (m->flags & TB_MSG_F_REPLAY)
		s->replayed++;
	switch (m->template_id) {
	case TB_MD_QUOTE_TEMPLATE_ID:
		on_quote(s, m);
		break;
	case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID:
		on_levels(s, m);
		break;
	case TB_MD_TRADE_TEMPLATE_ID: {
		tb_md_trade_t t;

		if (tb_md_trade_decode(m->data, m->len, &t) < 0)
			s->malformed++;
		else
			s->trades++;
		break;
	}
	case TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID: {
		tb_md_instrument_definition_t d;

		if (tb_md_instrument_definition_decode(m->data, m->len, &d) < 0)
			s->malformed++;
		else
			s->instruments++;
		break;
	}
	case TB_MD_TRADING_STATUS_TEMPLATE_ID: {
		tb_md_trading_status_t t;

		if (tb_md_trading_status_decode(m->data, m->len, &t) < 0)
			s->malformed++;
		else
			s->statuses++;
		break;
	}
	default:
		s->unknown++;
		break;
	}
}

/* ------------------------------------------------------- snapshot join */

/* What a message of the snapshot stream is (tb_snapshot_fn). */
static tb_snapshot_part_t snapshot_part(void *ctx, const tb_msg_t *m,
					uint64_t *seq)
{
	(void)ctx;
	switch (m->template_id) {
	case TB_MD_SNAPSHOT_BEGIN_TEMPLATE_ID: {
		tb_md_snapshot_begin_t b;

		if (tb_md_snapshot_begin_decode(m->data, m->len, &b) < 0)
			return TB_SNAPSHOT_NONE;
		*seq = b.last_feed_seq;
		return TB_SNAPSHOT_BEGIN;
	}
	case TB_MD_SNAPSHOT_END_TEMPLATE_ID: {
		tb_md_snapshot_end_t e;

		if (tb_md_snapshot_end_decode(m->data, m->len, &e) < 0)
			return TB_SNAPSHOT_NONE;
		*seq = e.last_feed_seq;
		return TB_SNAPSHOT_END;
	}
	case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID:
		return TB_SNAPSHOT_BODY;
	default:
		return TB_SNAPSHOT_NONE;
	}
}

/* The top of book of instrument `i` as its levels are. */
static void top_from_levels(strat_t *s, uint32_t i)
{
	const tb_lvbook_level_t *b = tb_lvbook_level(s->book, i, 0, 0);
	const tb_lvbook_level_t *a = tb_lvbook_level(s->book, i, 1, 0);
	top_t *t = &s->top[i];

	t->bid_px = b ? b->px : TB_MD_PRICE_MANTISSA_NULL;
	t->bid_qty = b ? b->qty : TB_MD_QUANTITY_NULL;
	t->ask_px = a ? a->px : TB_MD_PRICE_MANTISSA_NULL;
	t->ask_qty = a ? a->qty : TB_MD_QUANTITY_NULL;
	s->lvl[i][0] = (side_top_t){ t->bid_px, t->bid_qty, b != NULL };
	s->lvl[i][1] = (side_top_t){ t->ask_px, t->ask_qty, a != NULL };
	s->top_hash[i] = tb_md_top_hash(i, t->bid_px, t->bid_qty, t->ask_px,
					t->ask_qty);
}

/* The snapshot, whole, as tb_sub_start_at_snapshot hands it over: it
 * replaces the books and the top of book of every instrument it names. */
static void on_snapshot(void *ctx, const tb_msg_t *m)
{
	strat_t *s = ctx;

	switch (m->template_id) {
	case TB_MD_SNAPSHOT_BEGIN_TEMPLATE_ID:
		tb_lvbook_clear(s->book, UINT32_MAX);
		memset(s->top, 0, sizeof(s->top));
		memset(s->lvl, 0, sizeof(s->lvl));
		memset(s->top_hash, 0, sizeof(s->top_hash));
		memset(s->in_snapshot, 0, sizeof(s->in_snapshot));
		break;
	case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID: {
		tb_md_book_level_update_t u;
		tb_md_book_level_update_groups_t g;

		if (tb_md_book_level_update_decode(m->data, m->len, &u, &g) >= 0 &&
		    u.instrument_id < MAX_INSTR)
			s->in_snapshot[u.instrument_id] = 1;
		on_levels(s, m);
		s->level_updates--; /* counted as snapshot, not stream */
		break;
	}
	case TB_MD_SNAPSHOT_END_TEMPLATE_ID:
		for (uint32_t i = 0; i < MAX_INSTR; i++)
			if (s->in_snapshot[i])
				top_from_levels(s, i);
		break;
	default:
		break;
	}
}

/* Reads the acks waiting (non-blocking); returns how many. */
static int read_acks(strat_t *s)
{
	int n = 0;

	for (;;) {
		uint8_t buf[128];
		tb_gw_ack_t a;
		pending_t *p;
		ssize_t r = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
		uint64_t ts[6];
		int i, bad = 0;

		if (r < 0)
			return n;
		n++;
		if (tb_gw_ack_check(buf, (size_t)r, &a) != 0) {
			s->bad_acks++;
			continue;
		}
		p = &s->pend[a.order_id & (PENDING - 1)];
		if (p->id != a.order_id || a.order_id == 0) {
			s->unmatched_acks++;
			continue;
		}
		s->acks++;
		s->outstanding--;
		memcpy(ts, p->ts, sizeof(p->ts));
		ts[5] = a.arrival_ns;
		p->id = 0;
		for (i = 0; i < 5; i++) {
			if (ts[i + 1] < ts[i]) {
				int64_t d = (int64_t)(ts[i + 1] - ts[i]);

				bad = 1;
				s->hop_disorder[i]++;
				if (d < s->hop_min[i])
					s->hop_min[i] = d;
			}
			tb_hist_record(s->hop[i], (int64_t)(ts[i + 1] - ts[i]));
		}
		tb_hist_record(s->hop[5], (int64_t)(ts[5] - ts[0]));
		s->disorder += bad;
	}
}

/* "0.02" -> 20000000 (exponent -9); -1 if not a price >= 0. */
static int parse_price(const char *str, int64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(str, &end);
	if (!*str || *end || errno || !(v >= 0) || v > 1e9)
		return -1;
	*out = (int64_t)llround(v * 1e9);
	return 0;
}

static int parse_endpoint(const char *str, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(str, ':');
	uint64_t port;

	if (!colon || (size_t)(colon - str) >= sizeof(host) ||
	    tb_cli_u64_c(colon + 1, &port) || port == 0 || port > 65535)
		return -1;
	memcpy(host, str, (size_t)(colon - str));
	host[colon - str] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int write_hgrms(strat_t *s, const char *dir, const char *name)
{
	int i, rc = 0;

	for (i = 0; i < NHOPS; i++) {
		char path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s.%s.hgrm", dir, name, hop_name[i]);
		f = fopen(path, "w");
		if (!f || tb_hist_write_hgrm(s->hop[i], f, 1000.0, 0) != 0) {
			fprintf(stderr, "tb-strategy: cannot write %s: %s\n", path,
				f ? tb_errmsg() : strerror(errno));
			rc = -1;
		}
		if (f && fclose(f) != 0 && rc == 0) {
			fprintf(stderr, "tb-strategy: cannot write %s: %s\n", path,
				strerror(errno));
			rc = -1;
		}
	}
	return rc;
}

static uint64_t top_sum(const strat_t *s)
{
	uint64_t sum = 0;

	for (int i = 0; i < MAX_INSTR; i++)
		sum += s->top_hash[i];
	return sum;
}

typedef struct join {
	uint64_t at, join_ms, caught_up_ms, epochs, deaths;
} join_t;

static void report(strat_t *s, const char *name, int closed, uint64_t gaps,
		   uint64_t gapped, uint64_t laps, uint64_t data_loss, uint64_t lost,
		   const join_t *j)
{
	uint64_t sum = top_sum(s);
	int i;

	printf("%s: tick-to-trade per hop, %" PRIu64 " acked orders (us)\n", name,
	       s->acks);
	printf("%s:   %-20s %9s %9s %9s %9s\n", name, "hop", "p50", "p99",
	       "p99.9", "max");
	for (i = 0; i < NHOPS; i++)
		printf("%s:   %-20s %9.2f %9.2f %9.2f %9.2f\n", name, hop_name[i],
		       tb_hist_value_at_percentile(s->hop[i], 50.0) / 1e3,
		       tb_hist_value_at_percentile(s->hop[i], 99.0) / 1e3,
		       tb_hist_value_at_percentile(s->hop[i], 99.9) / 1e3,
		       tb_hist_max(s->hop[i]) / 1e3);
	printf("hops:");
	for (i = 0; i < NHOPS; i++)
		printf(" %s_count=%" PRId64 " %s_p50=%" PRId64 " %s_p99=%" PRId64
		       " %s_p999=%" PRId64 " %s_max=%" PRId64, hop_name[i],
		       tb_hist_count(s->hop[i]), hop_name[i],
		       tb_hist_value_at_percentile(s->hop[i], 50.0), hop_name[i],
		       tb_hist_value_at_percentile(s->hop[i], 99.0), hop_name[i],
		       tb_hist_value_at_percentile(s->hop[i], 99.9), hop_name[i],
		       tb_hist_max(s->hop[i]));
	for (i = 0; i < NHOPS - 1; i++)
		printf(" %s_negative=%" PRIu64 " %s_most_negative=%" PRId64,
		       hop_name[i], s->hop_disorder[i], hop_name[i], s->hop_min[i]);
	printf("\n");
	printf("strategy: name=%s closed=%d messages=%" PRIu64 " quotes=%" PRIu64
	       " trades=%" PRIu64 " level_updates=%" PRIu64 " levels=%" PRIu64
	       " instruments=%" PRIu64 " statuses=%" PRIu64 " malformed=%" PRIu64
	       " unknown=%" PRIu64 " out_of_range=%" PRIu64 " orders=%" PRIu64
	       " send_errors=%" PRIu64 " acks=%" PRIu64 " bad_acks=%" PRIu64
	       " unmatched_acks=%" PRIu64 " disorder=%" PRIu64
	       " level_checks=%" PRIu64 " level_mismatch=%" PRIu64
	       " gaps=%" PRIu64
	       " gapped=%" PRIu64 " laps=%" PRIu64 " data_loss=%" PRIu64 " lost=%" PRIu64
	       " recoveries=%" PRIu64 " replayed=%" PRIu64 " top_checksum=0x%016" PRIx64
	       " book_checksum=0x%016" PRIx64 " first_seq=%" PRIu64
	       " last_seq=%" PRIu64 " seq_errors=%" PRIu64 " epochs=%" PRIu64
	       " deaths=%" PRIu64 " book_refused=%" PRIu64 " joined_at=%" PRIu64
	       " join_ms=%" PRIu64 " caught_up_ms=%" PRIu64 "\n",
	       name, closed, s->messages, s->quotes, s->trades, s->level_updates,
	       s->levels, s->instruments, s->statuses, s->malformed, s->unknown,
	       s->out_of_range, s->orders, s->send_errors, s->acks, s->bad_acks,
	       s->unmatched_acks, s->disorder, s->level_checks,
	       s->level_mismatch, gaps, gapped, laps, data_loss, lost, s->recoveries, s->replayed,
	       sum, tb_lvbook_checksum(s->book), s->first_seq, s->last_seq,
	       s->seq_errors, j->epochs, j->deaths, s->book_refused, j->at,
	       j->join_ms, j->caught_up_ms);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		{"gateway", required_argument, 0, 'g'},
		{"name", required_argument, 0, 'n'},
		{"core", required_argument, 0, 'C'},
		{"max-spread", required_argument, 0, 'M'},
		{"qty", required_argument, 0, 'Q'},
		{"min-interval-us", required_argument, 0, 'I'},
		{"max-orders", required_argument, 0, 'O'},
		{"hgrm-dir", required_argument, 0, 'D'},
		{"timeout-ms", required_argument, 0, 'T'},
		{"ack-wait-ms", required_argument, 0, 'A'},
		{"snapshot", required_argument, 0, 'S'},
		{"snapshot-wait-ms", required_argument, 0, 'W'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static strat_t s;
	const char *config = NULL, *stream = NULL, *name = "strategy";
	const char *hgrm_dir = NULL, *gateway = "127.0.0.1:31010";
	const char *snap_stream = NULL;
	uint64_t snap_wait_ms = 30000, t_open;
	join_t join = {0, 0, 0, 0, 0};
	uint64_t core = UINT64_MAX, timeout_ms = 0, ack_wait_ms = 500, v, t0;
	uint64_t gaps = 0, laps = 0, data_loss = 0, lost = 0, gapped = 0;
	uint64_t printed = 0;
	struct sockaddr_in gw;
	tb_subscriber_t *sub;
	tb_idle_t idle;
	int c, i, rc = 0, closed = 0, failed = 0, recovering = 0;

	s.max_spread = 20000000; /* 0.02 */
	s.qty = 100;
	s.min_interval_ns = 1000000;
	s.max_orders = 1000000;
	while ((c = getopt_long(argc, argv, "c:s:g:n:h", opts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's': if (!*optarg) bad = "--stream"; else stream = optarg; break;
		case 'g': if (parse_endpoint(optarg, &gw)) bad = "--gateway (want ADDR:PORT)"; else gateway = optarg; break;
		case 'n': if (!*optarg || strlen(optarg) > 64 || strchr(optarg, '/') || strchr(optarg, ' ')) bad = "--name"; else name = optarg; break;
		case 'C': if (tb_cli_u64_c(optarg, &core) || core > 4095) bad = "--core"; break;
		case 'M': if (parse_price(optarg, &s.max_spread)) bad = "--max-spread"; break;
		case 'Q': if (tb_cli_u64_c(optarg, &s.qty) || s.qty == 0 || s.qty > UINT32_MAX) bad = "--qty"; break;
		case 'I': if (tb_cli_u64_c(optarg, &v) || v > 60000000) bad = "--min-interval-us"; else s.min_interval_ns = v * 1000; break;
		case 'O': if (tb_cli_u64_c(optarg, &s.max_orders)) bad = "--max-orders"; break;
		case 'D': if (!*optarg) bad = "--hgrm-dir"; else hgrm_dir = optarg; break;
		case 'T': if (tb_cli_u64_c(optarg, &timeout_ms)) bad = "--timeout-ms"; break;
		case 'A': if (tb_cli_u64_c(optarg, &ack_wait_ms) || ack_wait_ms > 60000) bad = "--ack-wait-ms"; break;
		case 'S': if (!*optarg) bad = "--snapshot"; else snap_stream = optarg; break;
		case 'W': if (tb_cli_u64_c(optarg, &snap_wait_ms) || snap_wait_ms == 0 || snap_wait_ms > 3600000) bad = "--snapshot-wait-ms"; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (bad)
			return tb_cli_bad_value(prog, NULL, bad, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);
	if (!config || !stream)
		return tb_cli_usage_error(prog, usage, "--config and --stream "
					  "are required");
	if (parse_endpoint(gateway, &gw))
		return tb_cli_usage_error(prog, NULL, "bad gateway '%s'",
					  gateway);
	(void)tb_clock_now_ns(); /* calibrates now, not on the first quote */
	for (i = 0; i < NHOPS; i++)
		if (tb_hist_init(&s.hop[i], 1, 100000000000ll, 3) != 0) {
			fprintf(stderr, "tb-strategy: %s\n", tb_errmsg());
			return 1;
		}
	s.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s.fd < 0 || connect(s.fd, (struct sockaddr *)&gw, sizeof(gw)) != 0) {
		fprintf(stderr, "tb-strategy: gateway %s: %s\n", gateway, strerror(errno));
		return 1;
	}
	if (core != UINT64_MAX && tb_thread_pin((int)core) != 0) {
		fprintf(stderr, "tb-strategy: pin to core %" PRIu64 ": %s\n", core,
			tb_errmsg());
		return 1;
	}
	if (tb_lvbook_create(&s.book, MAX_INSTR) != 0) {
		fprintf(stderr, "tb-strategy: out of memory\n");
		return 1;
	}
	t_open = tb_clock_mono_ms();
	rc = tb_subscriber_open_file(&sub, config, stream);
	if (rc) {
		fprintf(stderr, "tb-strategy: stream '%s' of %s: %s\n", stream,
			config, tb_errmsg());
		return 1;
	}
	tb_cli_on_stop_signals(&stop);
	printf("%s: ready stream=%s gateway=%s\n", name, stream, gateway);
	fflush(stdout);
	if (snap_stream) {
		/* Opened after the stream, so that the snapshot it takes is
		 * of a point the stream's transport still holds. */
		tb_subscriber_t *snap;

		rc = tb_subscriber_open_file(&snap, config, snap_stream);
		if (rc == 0) {
			rc = tb_sub_start_at_snapshot(sub, snap, snapshot_part,
						      on_snapshot, &s,
						      (uint32_t)snap_wait_ms,
						      &join.at);
			tb_subscriber_close(snap);
		}
		if (rc) {
			fprintf(stderr, "tb-strategy: join from snapshot stream '%s': "
				"%s\n", snap_stream, tb_errmsg());
			tb_subscriber_close(sub);
			return 1;
		}
		join.join_ms = tb_clock_mono_ms() - t_open;
		printf("%s: joined snapshot=%" PRIu64 " join_ms=%" PRIu64
		       " book_checksum=0x%016" PRIx64 " top_checksum=0x%016" PRIx64
		       "\n", name, join.at, join.join_ms,
		       tb_lvbook_checksum(s.book), top_sum(&s));
		fflush(stdout);
	}
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	t0 = tb_clock_mono_ms();
	while (!stop && !closed && (!timeout_ms || tb_clock_mono_ms() - t0 < timeout_ms)) {
		int n = tb_sub_poll(sub, on_msg, &s, 64);
		uint64_t first = 0, last = 0;
		/* Acks are read between polls, only while orders are out (a
		 * receive is a system call). */
		int acked = s.outstanding ? read_acks(&s) : 0;
		int rec = tb_sub_recovering(sub);

		s.recoveries += rec && !recovering; /* a gap being recovered */
		recovering = rec;
		if (n == 0 && snap_stream && !join.caught_up_ms && !rec)
			join.caught_up_ms = tb_clock_mono_ms() - t_open;
		if (n > 0 || n == TB_NOT_CONNECTED || n == 0) {
			tb_idle_step(&idle, (n > 0 ? n : 0) + acked);
			continue;
		}
		switch (n) {
		case TB_GAP: gaps++; break;
		case TB_LAPPED: laps++; break;
		case TB_DATA_LOSS: data_loss++; break;
		case TB_NEW_EPOCH:
			join.epochs++;
			fprintf(stderr, "%s: new epoch 0x%016" PRIx64 "\n", name,
				tb_sub_epoch(sub));
			s.last_seq = 0; /* sequences start again */
			continue;
		case TB_CLOSED: closed = 1; continue;
		case TB_PUBLISHER_DEAD:
			fprintf(stderr, "%s: the publisher died\n", name);
			join.deaths++;
			closed = 1;
			continue;
		default:
			fprintf(stderr, "%s: poll: %s\n", name, tb_strerror(n));
			failed = 1;
			closed = 1;
			continue;
		}
		if (tb_sub_loss(sub, &first, &last) == 0) {
			if (n != TB_GAP)
				lost += last - first + 1;
			else
				gapped += last - first + 1;
			if (printed++ < 16)
				printf("%s: loss kind=%s first=%" PRIu64 " last=%" PRIu64 "\n",
				       name, n == TB_GAP ? "gap" : n == TB_LAPPED ?
				       "lapped" : "data_loss", first, last);
		}
	}
	t0 = tb_clock_mono_ms();
	while (s.outstanding && tb_clock_mono_ms() - t0 < ack_wait_ms) {
		struct timespec ts = { 0, 1000000 };

		if (read_acks(&s) == 0)
			nanosleep(&ts, NULL);
	}
	report(&s, name, closed, gaps, gapped, laps, data_loss, lost, &join);
	if (hgrm_dir && write_hgrms(&s, hgrm_dir, name) != 0)
		failed = 1;
	tb_subscriber_close(sub);
	tb_lvbook_destroy(s.book);
	close(s.fd);
	for (i = 0; i < NHOPS; i++)
		tb_hist_free(s.hop[i]);
	if (failed)
		return 1;
	return closed || stop ? 0 : 1;
}
