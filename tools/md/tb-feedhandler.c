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
 * top_checksum is md_top.h's sum over the last Quote of every instrument.
 */
#include <tickbus/tickbus.h>
#include "tickbus_schema.h"
#include "tools/cli.h"
#include "tools/md/feed.h"
#include "tools/md/feed_opts.h"
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

/* Encodes message `m` of template `tid` in place, for each stream. */
static void emit(handler_t *h, uint16_t tid, uint32_t len, const void *m)
{
	int i;

	for (i = 0; i < h->npub; i++) {
		tb_claim_t c;
		int64_t enc, r;

		if (claim(h, h->pubs[i], tid, len, &c) != 0)
			continue;
		switch (tid) {
		case TB_MD_QUOTE_TEMPLATE_ID:
			enc = tb_md_quote_encode(c.data, c.len, m);
			break;
		case TB_MD_TRADE_TEMPLATE_ID:
			enc = tb_md_trade_encode(c.data, c.len, m);
			break;
		case TB_MD_BOOK_LEVEL_UPDATE_TEMPLATE_ID:
			enc = tb_md_book_level_update_encode(c.data, c.len, m, h->lv,
							     h->nlv);
			break;
		case TB_MD_INSTRUMENT_DEFINITION_TEMPLATE_ID:
			enc = tb_md_instrument_definition_encode(c.data, c.len, m);
			break;
		default:
			enc = tb_md_trading_status_encode(c.data, c.len, m);
			break;
		}
		if (enc < 0 || (uint64_t)enc != c.len) {
			/* Cannot happen: the claim was sized by the same encoder. */
			tb_pub_abort(h->pubs[i], &c);
			h->errors++;
			h->failed = 1;
			continue;
		}
		r = tb_pub_commit(h->pubs[i], &c);
		if (r < 0) {
			fprintf(stderr, "tb-feedhandler: commit: %s\n",
				tb_strerror((int)r));
			h->errors++;
			h->failed = 1;
			continue;
		}
		h->published[i]++;
	}
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
	case TB_FEED_EV_SYSTEM:
	case TB_FEED_EV_STALE:
		publish_status(h, ev);
		break;
	default:
		break;
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
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static handler_t h;
	const char *config = NULL, *streams[MAX_STREAMS];
	int nstreams = 0;
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
	fo.cfg.cb = on_event;
	fo.cfg.ctx = &h;
	(void)tb_clock_now_ns(); /* calibrates now, not on the first packet */
	h.midnight_ns = midnight_utc_ns();
	tb_idle_init(&h.idle, TB_IDLE_SPIN_YIELD);
	if (core != UINT64_MAX && tb_thread_pin((int)core) != 0) {
		fprintf(stderr, "tb-feedhandler: pin to core %" PRIu64 ": %s\n",
			core, tb_errmsg());
		return 1;
	}
	for (i = 0; i < (uint64_t)nstreams; i++) {
		rc = tb_publisher_open_file(&h.pubs[i], config, streams[i]);
		if (rc) {
			fprintf(stderr, "tb-feedhandler: stream '%s' of %s: %s\n",
				streams[i], config, tb_errmsg());
			close_all(&h);
			return 1;
		}
		h.npub++;
	}
	rc = tb_feed_open(&f, &fo.cfg);
	if (rc) {
		fprintf(stderr, "tb-feedhandler: feed %s:%u: %s\n", fo.cfg.group,
			fo.cfg.port, tb_md_error_msg());
		close_all(&h);
		return 1;
	}
	tb_cli_on_stop_signals(&stop);
	printf("feedhandler: ready port=%u streams=%d\n", tb_feed_port(f), h.npub);
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
		tb_idle_step(&idle, rc);
	}
	flush_levels(&h);
	flush_all(&h);
	ended = tb_feed_ended(f);
	tb_feed_stats(f, &st);
	for (i = 0; i < MAX_INSTR; i++)
		sum += h.top_hash[i];
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
	       " top_checksum=0x%016" PRIx64 "\n",
	       ended, h.published[0], h.quotes, h.trades, h.level_updates, h.levels,
	       h.instruments, h.statuses, h.book_events, h.unsent,
	       h.backpressured, h.deep_levels, st.gaps, st.gaps_filled,
	       st.gaps_lost, st.stale_reports, st.malformed_packets,
	       st.malformed_messages, st.messages, st.book_errors, h.errors, sum);
	fflush(stdout);
	tb_feed_close(f);
	close_all(&h);
	if (h.failed)
		return 1;
	return ended || stop ? 0 : 1;
}
