/*
 * tb-feedhandler - the reference feed handler: reads a MoldUDP64/ITCH feed
 * with the feed-handler core (tools/md/feed.c) and publishes its book
 * events on a tickbus stream, encoded with the generated market-data schema
 * (build/gen/tickbus_schema.h), zero copy (tb_pub_claim / tb_pub_commit).
 *
 * Mapping (feed.h):
 *   BOOK/TOP                     -> Quote
 *   BOOK/LEVEL_ADD|MODIFY|DELETE -> BookLevelUpdate; the level events one
 *                                   ITCH message causes on one instrument
 *                                   go into one message (one group entry
 *                                   each)
 *   BOOK/TRADE                   -> Trade (aggressorSide: the side opposite
 *                                   the resting order)
 *   INSTRUMENT                   -> InstrumentDefinition (symbol, USD, tick
 *                                   0.0001, state null)
 *   SYSTEM                       -> TradingStatus, instrumentId null (the
 *                                   whole market): 'O','S' PreOpen, 'Q' Open,
 *                                   'M','E','C' Closed
 *   STALE                        -> TradingStatus Halted for the instrument
 *                                   (its book lost data; the schema has no
 *                                   Stale state)
 * Prices: the feed's 4 implied decimals scaled to the schema's exponent -9.
 * An empty side of a Quote is a null price and a null quantity.
 * Timestamps: feedRecvTs is the receive time of the packet that carried the
 * message (tb_clock_now_ns() after the recvmmsg), exchangeTs the ITCH time
 * (ns since midnight) plus midnight UTC of the day the handler started; the
 * publish time is the frame's publish_ns, stamped by tb_pub_commit.
 *
 * Streams: -s may be given up to four times; every message then goes to
 * each stream in turn (claimed, encoded in place and committed on each:
 * encoding a message costs what copying it would).
 *
 * Hot failover.  What the handler publishes is a function of the feed: the
 * same ITCH messages give the same messages under the same sequence
 * numbers (only the receive and publish stamps differ).  With --session
 * and a first sequence (--first-seq, 1 by default) the start point is
 * known too, and the streams are opened in the epoch derived from the two
 * (feed_epoch below; tb_publisher_open_epoch) rather than a new one: two
 * handlers of the same feed, on one host or two, publish the same stream,
 * and a subscriber of both (`sources`) takes each message from whichever
 * is first.  A handler restarted with the same options republishes the
 * session from its first sequence (the retransmission server fills what
 * it missed), its copy of the stream coming back in the same epoch.  A gap
 * given up (STALE) breaks the promise for that handler: the two then
 * differ, which is why giving up is logged.  Without --session, or with
 * --first-seq 0 (join at the live point), each run is a new epoch.
 *
 * Lines A and B (--group-b, feed.h): both are read and arbitrated; a line
 * that falls silent, and one that comes back, is logged (stderr) while the
 * other carries the feed; the summary says what each line won and lost.
 * Each line is also an input in the process's counters (tb_input_*), so
 * tb-stat shows feed.A and feed.B beside the streams: delivered = what the
 * line won, duplicates = the copies it brought second, errors = the times
 * it fell silent.
 *
 * Snapshots (--snapshot STREAM).  Every --snapshot-every messages
 * published (counted on the first stream, checked after each ITCH message,
 * so two handlers of one feed take them at the same points), and every
 * --snapshot-ms if set, the handler publishes on STREAM, in the same
 * epoch: SnapshotBegin (snapshotId, lastFeedSeq = S, the last sequence of
 * the incremental streams it is consistent with, instrumentCount), one or
 * more BookLevelUpdate per instrument quoted so far with its levels as
 * Adds, best first, at most 32 to a message (an instrument with no levels
 * gets one empty message, so its empty book is told too), and SnapshotEnd
 * (snapshotId, S).  A late joiner applies it and the incremental stream
 * from S + 1 (tb_sub_start_at_snapshot; tb-strategy --snapshot).  Each
 * snapshot is logged on stdout with the checksums of the books it holds:
 *   feedhandler: snapshot id=K seq=S instruments=N levels=N
 *     book_checksum=0x... top_checksum=0x...
 *
 * Flow control: TB_BACK_PRESSURED is retried (spin then yield) until the
 * stream takes the message or a signal stops the handler; TB_NOT_CONNECTED
 * (rc with no subscriber yet) drops the message and counts it as unsent.
 *
 * Stops at the feed's end of session (every sequence before it applied or
 * given up), on SIGINT/SIGTERM, or after --timeout-ms; lingers --linger-ms
 * so subscribers drain, then closes the stream.
 *
 * Summary line (stdout), parsed by the scenario tests and tools/demo.sh:
 *   feedhandler: ended=0|1 published=N quotes=N trades=N level_updates=N
 *     levels=N instruments=N statuses=N book_events=N unsent=N
 *     backpressured=N feed_gaps=N filled=N lost=N stale=N malformed=N
 *     malformed_messages=N messages=N book_errors=N top_checksum=0x...
 *     book_checksum=0x... epoch=0x... snapshots=N requested_new=N lines=N
 *     a_won=N a_lost=N a_late_avg_ns=N a_late_max_ns=N a_silences=N
 *     (and b_... with line B)
 * top_checksum is md_top.h's sum over the last Quote of every instrument;
 * book_checksum is lvbook.h's over every level of the handler's books, as
 * a strategy keeping BookLevelUpdate computes it.
 */
#include <tickbus/tickbus.h>
#include "tickbus_schema.h"
#include "tools/cli.h"
#include "tools/md/feed.h"
#include "tools/hash.h"
#include "tools/md/feed_opts.h"
#include "tools/md/lvbook.h"
#include "tools/md/md_error.h"
#include "tools/md/md_top.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INSTR TB_FEED_OPTS_MAX_INSTRUMENTS
#define MAX_PENDING_LEVELS 32 /* one ITCH message touches at most a few */
#define MAX_STREAMS 4
#define OPT_SNAPSHOT 0x200
#define OPT_SNAPSHOT_EVERY 0x201
#define OPT_SNAPSHOT_MS 0x202

static const char prog[] = "tb-feedhandler";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-feedhandler -c CONFIG -s STREAM [-s STREAM2 ...] [options]\n"
"Reads a MoldUDP64/ITCH feed and publishes Quote, Trade, BookLevelUpdate,\n"
"InstrumentDefinition and TradingStatus on tickbus stream STREAM (and on\n"
"each further -s STREAM, up to 4).\n"
"options:\n"
"  -c, --config FILE        tickbus config file (required)\n"
"  -s, --stream NAME        stream to publish (required)\n");
	tb_feed_opts_usage(out);
	fprintf(out,
"      --snapshot STREAM    publish book snapshots on STREAM\n"
"      --snapshot-every N   a snapshot every N messages published\n"
"                           (default 100000; 0 = on time only)\n"
"      --snapshot-ms MS     and every MS milliseconds (default 0 = never;\n"
"                           two handlers then snapshot at other points)\n"
"      --timeout-ms MS      stop after this long, 0 = never (default 0)\n"
"      --linger-ms MS       wait before closing the stream (default 200)\n"
"      --core N             pin the handler thread to core N\n"
"  -h, --help               this text\n"
"exit status: 0 end of session reached or stopped by a signal, 1 error or\n"
"timeout, 2 usage\n");
}

typedef struct handler {
	tb_publisher_t *pubs[MAX_STREAMS];
	int npub;
	tb_feed_t *feed;          /* for the snapshots' books */
	tb_publisher_t *snap;     /* the snapshot stream, or NULL */
	uint64_t snap_every, snap_ns, snap_last_ns, snap_at, snap_id;
	uint64_t stale_seq;
	uint64_t published[MAX_STREAMS];
	uint64_t midnight_ns;
	tb_idle_t idle;
	/* level events waiting to go out as one BookLevelUpdate */
	tb_md_book_level_update_t blu;
	tb_md_book_level_update_levels_entry_t lv[MAX_PENDING_LEVELS];
	uint16_t nlv;
	uint64_t blu_seq;
	/* counters */
	uint64_t quotes, trades, level_updates, levels, instruments;
	uint64_t statuses, book_events, unsent, backpressured, deep_levels;
	uint64_t errors;
	int failed;
	/* last published top per instrument, for the checksum */
	uint64_t top_hash[MAX_INSTR];
} handler_t;

/* Claims `len` bytes, retrying while back-pressured.  Returns 0 with the
 * claim, or a negative code (TB_NOT_CONNECTED counted as unsent). */
static int claim(handler_t *h, tb_publisher_t *pub, uint16_t tid,
		 uint32_t len, tb_claim_t *c)
{
	int bp = 0;

	for (;;) {
		int rc = tb_pub_claim(pub, tid, len, c);

		if (rc == 0) {
			h->idle.spins = 0;
			return 0;
		}
		if (rc == TB_BACK_PRESSURED && !stop) {
			if (!bp++)
				h->backpressured++;
			tb_idle_step(&h->idle, 0);
			continue;
		}
		if (rc == TB_NOT_CONNECTED) {
			h->unsent++;
		} else if (rc != TB_BACK_PRESSURED) {
			fprintf(stderr, "tb-feedhandler: claim: %s\n", tb_strerror(rc));
			h->errors++;
			h->failed = 1;
		}
		return rc;
	}
}

/* Encodes message `m` of template `tid` in place on `pub` (a
 * BookLevelUpdate with the `nlv` entries `lv`).  Returns 0 or -1. */
static int emit_on(handler_t *h, tb_publisher_t *pub, uint16_t tid,
		   uint32_t len, const void *m,
		   const tb_md_book_level_update_levels_entry_t *lv, uint16_t nlv)
{
	tb_claim_t c;
	int64_t enc, r;

	if (claim(h, pub, tid, len, &c) != 0)
		return -1;
	switch (tid) {
	case TB_MD_QUOTE_TEMPLATE_ID:
		enc = tb_md_quote_encode(c.data, c.len, m);
		break;
	case TB_MD_TRADE_TEMPLATE_ID:
		enc = tb_md_trade_encode(c.data, c.len, m);
		break;
	case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID:
		enc = tb_md_book_level_update_encode(c.data, c.len, m, lv, nlv);
		break;
	case TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID:
		enc = tb_md_instrument_definition_encode(c.data, c.len, m);
		break;
	case TB_MD_SNAPSHOT_BEGIN_TEMPLATE_ID:
		enc = tb_md_snapshot_begin_encode(c.data, c.len, m);
		break;
	case TB_MD_SNAPSHOT_END_TEMPLATE_ID:
		enc = tb_md_snapshot_end_encode(c.data, c.len, m);
		break;
	default:
		enc = tb_md_trading_status_encode(c.data, c.len, m);
		break;
	}
	if (enc < 0 || (uint64_t)enc != c.len) {
		/* Cannot happen: the claim was sized by the same encoder. */
		tb_pub_abort(pub, &c);
		h->errors++;
		h->failed = 1;
		return -1;
	}
	r = tb_pub_commit(pub, &c);
	if (r < 0) {
		fprintf(stderr, "tb-feedhandler: commit: %s\n", tb_strerror((int)r));
		h->errors++;
		h->failed = 1;
		return -1;
	}
	return 0;
}

/* Encodes message `m` of template `tid` in place, for each stream. */
static void emit(handler_t *h, uint16_t tid, uint32_t len, const void *m)
{
	for (int i = 0; i < h->npub; i++)
		if (emit_on(h, h->pubs[i], tid, len, m, h->lv, h->nlv) == 0)
			h->published[i]++;
}

static void flush_levels(handler_t *h)
{
	if (!h->nlv)
		return;
	emit(h, TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID,
	     (uint32_t)tb_md_book_level_update_encoded_len(h->nlv), &h->blu);
	h->level_updates++;
	h->levels += h->nlv;
	h->nlv = 0;
}

static int64_t px(int64_t feed_px)
{
	return feed_px * TB_MD_TOP_PX_SCALE;
}

static uint64_t exch_ts(const handler_t *h, const tb_feed_event_t *ev)
{
	return ev->exch_ns ? h->midnight_ns + ev->exch_ns : TB_MD_TIMESTAMP_NULL;
}

static void publish_quote(handler_t *h, const tb_feed_event_t *ev)
{
	const tb_book_event_t *b = &ev->book;
	tb_md_quote_t q;

	tb_md_quote_init(&q);
	q.instrument_id = ev->instrument;
	if (b->bid_qty) {
		q.bid_px.mantissa = px(b->bid_px);
		q.bid_qty = b->bid_qty;
	}
	if (b->ask_qty) {
		q.ask_px.mantissa = px(b->ask_px);
		q.ask_qty = b->ask_qty;
	}
	q.exchange_ts = exch_ts(h, ev);
	q.feed_recv_ts = ev->feed_receive_ns;
	emit(h, TB_MD_QUOTE_TEMPLATE_ID, (uint32_t)tb_md_quote_encoded_len(), &q);
	h->quotes++;
	if (ev->instrument < MAX_INSTR)
		h->top_hash[ev->instrument] =
			tb_md_top_hash(ev->instrument, q.bid_px.mantissa, q.bid_qty,
				       q.ask_px.mantissa, q.ask_qty);
}

static void publish_trade(handler_t *h, const tb_feed_event_t *ev)
{
	const tb_book_event_t *b = &ev->book;
	tb_md_trade_t t;

	tb_md_trade_init(&t);
	t.instrument_id = ev->instrument;
	t.price.mantissa = px(b->price);
	t.qty = b->qty;
	t.trade_id = b->match;
	t.exchange_ts = exch_ts(h, ev);
	t.feed_recv_ts = ev->feed_receive_ns;
	t.aggressor_side = b->side == TB_BOOK_BID ? 2 : 1;
	emit(h, TB_MD_TRADE_TEMPLATE_ID, (uint32_t)tb_md_trade_encoded_len(), &t);
	h->trades++;
}

static void add_level(handler_t *h, const tb_feed_event_t *ev)
{
	const tb_book_event_t *b = &ev->book;
	tb_md_book_level_update_levels_entry_t *e;

	if (b->level >= TB_MD_LEVEL_NULL) {
		h->deep_levels++; /* deeper than the schema's Level can say */
		return;
	}
	if (h->nlv && (h->blu_seq != ev->seq ||
		       h->blu.instrument_id != ev->instrument ||
		       h->nlv == MAX_PENDING_LEVELS))
		flush_levels(h);
	if (!h->nlv) {
		tb_md_book_level_update_init(&h->blu);
		h->blu.instrument_id = ev->instrument;
		h->blu.exchange_ts = exch_ts(h, ev);
		h->blu.feed_recv_ts = ev->feed_receive_ns;
		h->blu_seq = ev->seq;
	}
	e = &h->lv[h->nlv++];
	tb_md_book_level_update_levels_entry_init(e);
	e->action = (uint8_t)(b->kind - TB_BOOK_EV_LEVEL_ADD); /* Add, Modify, Delete */
	e->side = b->side == TB_BOOK_BID ? 1 : 2;
	e->level = (uint8_t)b->level;
	e->price.mantissa = px(b->price);
	e->qty = b->qty;
	e->order_count = b->orders;
}

static void publish_definition(handler_t *h, const tb_feed_event_t *ev)
{
	tb_md_instrument_definition_t d;
	size_t n = sizeof(ev->symbol);

	tb_md_instrument_definition_init(&d);
	d.instrument_id = ev->instrument;
	while (n && ev->symbol[n - 1] == ' ')
		n--;
	memcpy(d.symbol, ev->symbol, n);
	memcpy(d.currency, "USD", 3);
	d.tick_size.mantissa = px(1);
	emit(h, TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID,
	     (uint32_t)tb_md_instrument_definition_encoded_len(), &d);
	h->instruments++;
}

static void publish_status(handler_t *h, const tb_feed_event_t *ev)
{
	tb_md_trading_status_t s;

	tb_md_trading_status_init(&s);
	s.exchange_ts = exch_ts(h, ev);
	if (ev->kind == TB_FEED_EV_STALE) {
		s.instrument_id = ev->instrument;
		s.state = 3; /* Halted */
	} else {
		s.instrument_id = TB_MD_INSTRUMENT_ID_NULL;
		switch (ev->system_code) {
		case 'O': case 'S': s.state = 1; break; /* PreOpen */
		case 'Q': s.state = 2; break;           /* Open */
		case 'M': case 'E': case 'C': s.state = 5; break; /* Closed */
		default: return;                        /* not a state change */
		}
	}
	emit(h, TB_MD_TRADING_STATUS_TEMPLATE_ID,
	     (uint32_t)tb_md_trading_status_encoded_len(), &s);
	h->statuses++;
}

/* The feed's callback: one book event in, at most one message out (level
 * events are gathered per ITCH message). */
static void on_event(void *ctx, const tb_feed_event_t *ev)
{
	handler_t *h = ctx;
	int level = ev->kind == TB_FEED_EV_BOOK &&
		    ev->book.kind >= TB_BOOK_EV_LEVEL_ADD &&
		    ev->book.kind <= TB_BOOK_EV_LEVEL_DELETE;

	if (!level)
		flush_levels(h);
	switch (ev->kind) {
	case TB_FEED_EV_BOOK:
		h->book_events++;
		if (level)
			add_level(h, ev);
		else if (ev->book.kind == TB_BOOK_EV_TOP)
			publish_quote(h, ev);
		else if (ev->book.kind == TB_BOOK_EV_TRADE)
			publish_trade(h, ev);
		break;
	case TB_FEED_EV_INSTRUMENT:
		publish_definition(h, ev);
		break;
	case TB_FEED_EV_STALE:
		if (ev->seq != h->stale_seq) {
			/* Another handler of the feed may not have given it
			 * up: from here on the two publish different
			 * streams under one epoch. */
			h->stale_seq = ev->seq;
			fprintf(stderr, "tb-feedhandler: gave up the feed from "
				"sequence %" PRIu64 "; books reported stale\n",
				ev->seq);
		}
		publish_status(h, ev);
		break;
	case TB_FEED_EV_SYSTEM:
		publish_status(h, ev);
		break;
	default:
		break;
	}
}

static uint64_t top_checksum(const handler_t *h)
{
	uint64_t sum = 0;

	for (int i = 0; i < MAX_INSTR; i++)
		sum += h->top_hash[i];
	return sum;
}

/* One snapshot on h->snap of the books as they are: consistent with the
 * last message published on the incremental streams. */
static void take_snapshot(handler_t *h)
{
	const tb_book_t *book = tb_feed_book(h->feed);
	uint64_t seq = tb_pub_next_seq(h->pubs[0]) - 1, levels = 0;
	tb_md_snapshot_begin_t sb;
	tb_md_snapshot_end_t se;
	uint32_t n = 0;

	for (int i = 0; i < MAX_INSTR; i++)
		n += h->top_hash[i] != 0;
	tb_md_snapshot_begin_init(&sb);
	sb.snapshot_id = ++h->snap_id;
	sb.last_feed_seq = seq;
	sb.instrument_count = n;
	emit_on(h, h->snap, TB_MD_SNAPSHOT_BEGIN_TEMPLATE_ID,
		(uint32_t)tb_md_snapshot_begin_encoded_len(), &sb, NULL, 0);
	for (uint32_t i = 0; i < MAX_INSTR; i++) {
		tb_md_book_level_update_levels_entry_t lv[MAX_PENDING_LEVELS];
		tb_book_level_t bl[TB_LVBOOK_DEPTH];
		tb_md_book_level_update_t u;
		uint16_t k = 0;
		int sent = 0;

		if (!h->top_hash[i])
			continue; /* never quoted: nothing to tell */
		tb_md_book_level_update_init(&u);
		u.instrument_id = i;
		for (int side = 0; side < 2; side++) {
			int nl = tb_book_levels(book, i, (tb_book_side_t)side, bl,
						TB_LVBOOK_DEPTH);

			for (int l = 0; l < nl; l++) {
				tb_md_book_level_update_levels_entry_init(&lv[k]);
				lv[k].action = 0; /* Add */
				lv[k].side = (uint8_t)(side + 1);
				lv[k].level = (uint8_t)l;
				lv[k].price.mantissa = px(bl[l].price);
				lv[k].qty = bl[l].qty;
				lv[k].order_count = bl[l].orders;
				levels++;
				if (++k == MAX_PENDING_LEVELS) {
					emit_on(h, h->snap,
						TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID,
						(uint32_t)tb_md_book_level_update_encoded_len(k),
						&u, lv, k);
					k = 0;
					sent = 1;
				}
			}
		}
		if (k || !sent)
			emit_on(h, h->snap, TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID,
				(uint32_t)tb_md_book_level_update_encoded_len(k),
				&u, lv, k);
	}
	tb_md_snapshot_end_init(&se);
	se.snapshot_id = sb.snapshot_id;
	se.last_feed_seq = seq;
	emit_on(h, h->snap, TB_MD_SNAPSHOT_END_TEMPLATE_ID,
		(uint32_t)tb_md_snapshot_end_encoded_len(), &se, NULL, 0);
	tb_pub_flush(h->snap);
	h->snap_at = h->published[0];
	h->snap_last_ns = tb_clock_mono_ns();
	printf("feedhandler: snapshot id=%" PRIu64 " seq=%" PRIu64
	       " instruments=%u levels=%" PRIu64 " book_checksum=0x%016" PRIx64
	       " top_checksum=0x%016" PRIx64 "\n", sb.snapshot_id, seq, n,
	       levels, tb_lvbook_book_checksum(book, MAX_INSTR, TB_MD_TOP_PX_SCALE),
	       top_checksum(h));
	fflush(stdout);
}

/* The feed applied an ITCH message: what it caused is published (its
 * level events too), so the books are consistent with the streams - the
 * point for a snapshot when one is due by count. */
static void on_applied(void *ctx, uint64_t seq)
{
	handler_t *h = ctx;

	(void)seq;
	if (!h->snap)
		return;
	flush_levels(h);
	if (h->snap_every && h->published[0] - h->snap_at >= h->snap_every)
		take_snapshot(h);
}

/* The epoch of a feed's stream from what every handler of it agrees on:
 * the MoldUDP64 session (space padded, as on the wire) and the first
 * sequence.  Never 0. */
static uint64_t feed_epoch(const char *session, uint64_t first_seq)
{
	char s[TB_MOLD_SESSION_LEN];
	uint64_t h;

	memset(s, ' ', sizeof(s));
	memcpy(s, session, strnlen(session, sizeof(s)));
	h = tb_hash_fnv1a64(TB_HASH_FNV1A_INIT, s, sizeof(s));
	h = tb_hash_mix64(h ^ tb_hash_mix64(first_seq + TB_HASH_GOLDEN));
	return h ? h : 1;
}

/* Opens stream `name` of `file` in `epoch` (0: a new one). */
static int open_stream(tb_publisher_t **pub, const tb_config_t *file,
		       const char *name, uint64_t epoch)
{
	const tb_stream_cfg_t *cfg = tb_config_stream(file, name);

	if (!cfg)
		return TB_ENOENT;
	return epoch ? tb_publisher_open_epoch(pub, cfg, epoch) :
		       tb_publisher_open(pub, cfg);
}

/* The lines' inputs in the counters file, brought up to the feed's
 * figures. */
static void count_lines(tb_input_t *const in[TB_FEED_LINES],
			const tb_feed_stats_t *st)
{
	for (int l = 0; l < st->lines; l++) {
		const tb_feed_line_stats_t *ls = &st->line[l];

		if (!in[l])
			continue;
		tb_input_add(in[l], TB_INPUT_DELIVERED, ls->won -
			     tb_input_get(in[l], TB_INPUT_DELIVERED));
		tb_input_add(in[l], TB_INPUT_DUPLICATES, ls->lost -
			     tb_input_get(in[l], TB_INPUT_DUPLICATES));
		tb_input_add(in[l], TB_INPUT_ERRORS, ls->silences -
			     tb_input_get(in[l], TB_INPUT_ERRORS));
	}
}

/* Logs a line that fell silent or came back; counts the lines. */
static void watch_lines(const tb_feed_t *f, int silent[TB_FEED_LINES],
			tb_input_t *const in[TB_FEED_LINES])
{
	tb_feed_stats_t st;

	tb_feed_stats(f, &st);
	if (st.lines < 2)
		return;
	count_lines(in, &st);
	for (int l = 0; l < st.lines; l++)
		if (st.line[l].silent != silent[l]) {
			silent[l] = st.line[l].silent;
			if (silent[l])
				fprintf(stderr, "tb-feedhandler: line %c silent "
					"for %" PRIu64 " ms (at sequence %" PRIu64
					"); going on with line %c\n", 'A' + l,
					(tb_clock_now_ns() - st.line[l].last_ns) /
					1000000, st.next_seq, 'A' + (1 - l));
			else
				fprintf(stderr, "tb-feedhandler: line %c back at "
					"sequence %" PRIu64 "\n", 'A' + l,
					st.next_seq);
		}
}

static void flush_all(handler_t *h)
{
	for (int i = 0; i < h->npub; i++)
		tb_pub_flush(h->pubs[i]);
}

static void close_all(handler_t *h)
{
	for (int i = 0; i < h->npub; i++)
		tb_publisher_close(h->pubs[i]);
	h->npub = 0;
	tb_publisher_close(h->snap);
	h->snap = NULL;
}

static uint64_t midnight_utc_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)(ts.tv_sec - ts.tv_sec % 86400) * 1000000000ull;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		TB_FEED_OPTS_LONG,
		{"timeout-ms", required_argument, 0, 'T'},
		{"linger-ms", required_argument, 0, 'L'},
		{"core", required_argument, 0, 'C'},
		{"snapshot", required_argument, 0, OPT_SNAPSHOT},
		{"snapshot-every", required_argument, 0, OPT_SNAPSHOT_EVERY},
		{"snapshot-ms", required_argument, 0, OPT_SNAPSHOT_MS},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static handler_t h = {.snap_every = 100000};
	const char *config = NULL, *streams[MAX_STREAMS], *snap_stream = NULL;
	int nstreams = 0, silent[TB_FEED_LINES] = {0, 0};
	tb_input_t *line_in[TB_FEED_LINES] = {NULL, NULL};
	uint64_t epoch = 0, polls = 0, snap_ms = 0;
	tb_config_t *file;
	tb_feed_opts_t fo;
	tb_feed_t *f;
	tb_feed_stats_t st;
	uint64_t timeout_ms = 0, linger_ms = 200;
	uint64_t t0, core = UINT64_MAX, sum = 0, i;
	tb_idle_t idle;
	int c, rc, ended;

	tb_feed_opts_init(&fo);
	while ((c = getopt_long(argc, argv, "c:s:" TB_FEED_OPTS_SHORT "h", opts,
				NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's':
			if (!*optarg || nstreams == MAX_STREAMS)
				bad = "--stream (1 to 4 streams)";
			else
				streams[nstreams++] = optarg;
			break;
		case 'T': if (tb_cli_u64_c(optarg, &timeout_ms)) bad = "--timeout-ms"; break;
		case 'L': if (tb_cli_u64_c(optarg, &linger_ms) || linger_ms > 60000) bad = "--linger-ms"; break;
		case 'C': if (tb_cli_u64_c(optarg, &core) || core > 4095) bad = "--core"; break;
		case OPT_SNAPSHOT: if (!*optarg) bad = "--snapshot"; else snap_stream = optarg; break;
		case OPT_SNAPSHOT_EVERY: if (tb_cli_u64_c(optarg, &h.snap_every)) bad = "--snapshot-every"; break;
		case OPT_SNAPSHOT_MS: if (tb_cli_u64_c(optarg, &snap_ms) || snap_ms > 3600000) bad = "--snapshot-ms"; break;
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
	if (!config || !nstreams)
		return tb_cli_usage_error(prog, usage, "--config and --stream "
					  "are required");
	tb_feed_opts_done(&fo);
	if (snap_stream && !h.snap_every && !snap_ms)
		return tb_cli_usage_error(prog, usage, "--snapshot needs "
					  "--snapshot-every or --snapshot-ms");
	fo.cfg.cb = on_event;
	fo.cfg.applied = on_applied;
	fo.cfg.ctx = &h;
	h.snap_ns = snap_ms * 1000000ull;
	(void)tb_clock_now_ns(); /* calibrates now, not on the first packet */
	h.midnight_ns = midnight_utc_ns();
	tb_idle_init(&h.idle, TB_IDLE_SPIN_YIELD);
	if (core != UINT64_MAX && tb_thread_pin((int)core) != 0) {
		fprintf(stderr, "tb-feedhandler: pin to core %" PRIu64 ": %s\n",
			core, tb_errmsg());
		return 1;
	}
	if (tb_config_load(&file, config) < 0) {
		fprintf(stderr, "tb-feedhandler: %s\n", tb_errmsg());
		return 1;
	}
	if (fo.cfg.session && fo.cfg.first_seq > 0)
		epoch = feed_epoch(fo.cfg.session, fo.cfg.first_seq);
	for (i = 0; i < (uint64_t)nstreams; i++) {
		rc = open_stream(&h.pubs[i], file, streams[i], epoch);
		if (rc) {
			fprintf(stderr, "tb-feedhandler: stream '%s' of %s: %s\n",
				streams[i], config, tb_errmsg());
			close_all(&h);
			tb_config_free(file);
			return 1;
		}
		h.npub++;
	}
	/* The snapshots go with the incremental stream: its epoch. */
	if (snap_stream && open_stream(&h.snap, file, snap_stream,
				       tb_pub_epoch(h.pubs[0])) != 0) {
		fprintf(stderr, "tb-feedhandler: snapshot stream '%s' of %s: %s\n",
			snap_stream, config, tb_errmsg());
		close_all(&h);
		tb_config_free(file);
		return 1;
	}
	tb_config_free(file);
	rc = tb_feed_open(&f, &fo.cfg);
	if (rc) {
		fprintf(stderr, "tb-feedhandler: feed %s:%u: %s\n", fo.cfg.group,
			fo.cfg.port, tb_md_error_msg());
		close_all(&h);
		return 1;
	}
	h.feed = f;
	h.snap_last_ns = tb_clock_mono_ns();
	if (fo.cfg.group_b)
		for (i = 0; i < TB_FEED_LINES; i++)
			if (tb_input_open(&line_in[i], (uint32_t)i,
					  i ? "feed.B" : "feed.A", "mold") != 0)
				fprintf(stderr, "tb-feedhandler: line counters: %s\n",
					tb_errmsg());
	tb_cli_on_stop_signals(&stop);
	printf("feedhandler: ready port=%u streams=%d epoch=0x%016" PRIx64 "%s\n",
	       tb_feed_port(f), h.npub, tb_pub_epoch(h.pubs[0]),
	       epoch ? " (of the feed)" : " (new)");
	fflush(stdout);
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	t0 = tb_clock_mono_ms();
	while (!stop && !h.failed && !tb_feed_ended(f) &&
	       (!timeout_ms || tb_clock_mono_ms() - t0 < timeout_ms)) {
		rc = tb_feed_poll(f);
		if (rc < 0) {
			fprintf(stderr, "tb-feedhandler: feed: %s\n",
				tb_md_error_msg());
			h.failed = 1;
			break;
		}
		/* The last ITCH message of the batch may have left level events
		 * waiting: they go out before the handler idles. */
		flush_levels(&h);
		if (rc > 0)
			flush_all(&h);
		if (h.snap && h.snap_ns && h.published[0] != h.snap_at &&
		    tb_clock_mono_ns() - h.snap_last_ns >= h.snap_ns)
			take_snapshot(&h);
		if (rc == 0 || (++polls & 1023) == 0)
			watch_lines(f, silent, line_in);
		tb_idle_step(&idle, rc);
	}
	flush_levels(&h);
	flush_all(&h);
	ended = tb_feed_ended(f);
	tb_feed_stats(f, &st);
	sum = top_checksum(&h);
	/* Let subscribers drain before the stream says closed; the idle loop
	 * keeps heartbeats going where the transport needs polls. */
	t0 = tb_clock_mono_ms();
	while (tb_clock_mono_ms() - t0 < linger_ms) {
		struct timespec ts = { 0, 1000000 };

		flush_all(&h);
		nanosleep(&ts, NULL);
	}
	for (i = 1; i < (uint64_t)h.npub; i++)
		printf("feedhandler: stream=%s published_%d=%" PRIu64 "\n",
		       streams[i], (int)i, h.published[i]);
	printf("feedhandler: ended=%d published=%" PRIu64 " quotes=%" PRIu64
	       " trades=%" PRIu64 " level_updates=%" PRIu64 " levels=%" PRIu64
	       " instruments=%" PRIu64 " statuses=%" PRIu64
	       " book_events=%" PRIu64 " unsent=%" PRIu64
	       " backpressured=%" PRIu64 " deep_levels=%" PRIu64
	       " feed_gaps=%" PRIu64 " filled=%" PRIu64 " lost=%" PRIu64
	       " stale=%" PRIu64 " malformed=%" PRIu64
	       " malformed_messages=%" PRIu64 " messages=%" PRIu64
	       " book_errors=%" PRIu64 " errors=%" PRIu64
	       " top_checksum=0x%016" PRIx64 " book_checksum=0x%016" PRIx64
	       " epoch=0x%016" PRIx64 " snapshots=%" PRIu64
	       " requested_new=%" PRIu64 " lines=%d",
	       ended, h.published[0], h.quotes, h.trades, h.level_updates, h.levels,
	       h.instruments, h.statuses, h.book_events, h.unsent,
	       h.backpressured, h.deep_levels, st.gaps, st.gaps_filled,
	       st.gaps_lost, st.stale_reports, st.malformed_packets,
	       st.malformed_messages, st.messages, st.book_errors, h.errors, sum,
	       tb_lvbook_book_checksum(tb_feed_book(f), MAX_INSTR, TB_MD_TOP_PX_SCALE),
	       tb_pub_epoch(h.pubs[0]), h.snap_id, st.requested_new, st.lines);
	for (int l = 0; l < st.lines; l++) {
		const tb_feed_line_stats_t *ls = &st.line[l];
		char x = (char)('a' + l);

		printf(" %c_won=%" PRIu64 " %c_lost=%" PRIu64 " %c_late_avg_ns=%" PRIu64
		       " %c_late_max_ns=%" PRIu64 " %c_silences=%" PRIu64, x, ls->won,
		       x, ls->lost, x,
		       ls->late_packets ? ls->late_ns_sum / ls->late_packets : 0,
		       x, ls->late_ns_max, x, ls->silences);
	}
	printf("\n");
	fflush(stdout);
	for (i = 0; i < TB_FEED_LINES; i++)
		tb_input_close(line_in[i]);
	tb_feed_close(f);
	close_all(&h);
	if (h.failed)
		return 1;
	return ended || stop ? 0 : 1;
}
