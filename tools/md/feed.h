/*
 * feed.h - the feed-handler core: a MoldUDP64/ITCH feed in, book events out.
 *
 * tb_feed_t joins the exchange's multicast group, reads it with a
 * non-blocking busy poll (recvmmsg, a batch per call), keeps the MoldUDP64
 * sequence, applies the ITCH messages in sequence order to an order book per
 * instrument (book.h) and calls the callback once per book event, with the
 * time the packet that carried the message was received (tb_clock_now_ns()
 * right after the recvmmsg that returned it).  Publishing those events on
 * tickbus is the caller's job: this module knows nothing of the bus.
 *
 * A and B lines.  Exchanges send every packet twice, on two groups (lines
 * A and B) that lose and delay packets independently.  With `group_b` set
 * the feed joins both and arbitrates: the first copy of a packet is taken
 * (its messages are *won* by that line), the second is dropped whole and
 * counted against its line as *lost*, with how much later than the first
 * it came (a ring of the last TB_FEED_ARB_SLOTS packets' first arrivals,
 * indexed by sequence).  A hole one line shows is left to the other for
 * up to `ab_wait_ns`, or until the other line too has gone past it: only
 * what both lines missed is re-requested.  A line that brings nothing
 * (not even a heartbeat) for `line_timeout_ns` is *silent* (counted, and
 * flagged in the stats for the caller to report) and no longer waited
 * for; its next packet brings it back.
 *
 * Gaps.  A packet beyond the next expected sequence is kept (up to
 * `pending_max` packets) and the missing range is re-requested from the
 * retransmission server (MoldUDP64 request packets from a unicast socket;
 * one hole at a time: [next, first sequence held), at most `req_max`
 * messages, the next request as soon as the previous one is answered, so
 * nothing already held is sent twice).  A request that goes unanswered is repeated
 * after `gap_timeout_ns`, doubling each time, `gap_retries` times (a
 * request answered in part is followed by one for the rest, which starts
 * the count again); then the
 * range is given up: every instrument seen so far is reported STALE (its
 * book can no longer be trusted: messages that touched it may be lost),
 * the books are cleared, and the handler resynchronises at the first
 * sequence it holds (or the highest announced).  Messages that then refer
 * to orders it never saw are counted as book errors and ignored.
 *
 * Malformed input.  A packet that fails tb_mold_parse() is counted by kind
 * and dropped whole (its sequences, if it had any, are recovered as a gap);
 * a packet of another session is counted and dropped; a malformed message
 * inside a good packet is counted and skipped (its sequence is consumed).
 * Unknown ITCH types are counted and skipped.
 *
 * Instruments are the ITCH stock locate codes, 0 .. max_instruments-1.
 * Prices are the ITCH u32 with four implied decimals, as int64 mantissas
 * (exponent -4).
 *
 * Publishing (for the feed handler that wires this to tickbus): the events
 * map one to one onto the market-data schema -
 *   BOOK/TOP                      -> Quote (bid_px, bid_qty, ask_px, ask_qty)
 *   BOOK/LEVEL_ADD|MODIFY|DELETE  -> BookLevelUpdate (side, level, price,
 *                                    qty, orders)
 *   BOOK/TRADE                    -> Trade (price, qty, match; `side` is the
 *                                    resting order's, the aggressor is the
 *                                    other side)
 *   INSTRUMENT -> InstrumentDefinition, SYSTEM and STALE -> TradingStatus.
 * Every event of one ITCH message carries that message's `seq`, so a
 * publisher can batch them and stamp its publish time once.
 *
 * Threads: one thread owns a tb_feed_t (open, poll, close); the callback
 * runs on it, inside tb_feed_poll().
 */
#ifndef TB_FEED_H
#define TB_FEED_H

#include "tools/md/book.h"
#include "tools/md/itch.h"
#include "tools/md/mold.h"

#include <stdint.h>

#define TB_FEED_PRICE_EXPONENT (-4)

typedef enum tb_feed_ev_kind {
	TB_FEED_EV_BOOK = 1,       /* `book` holds a book event */
	TB_FEED_EV_INSTRUMENT = 2, /* stock directory: `symbol` */
	TB_FEED_EV_SYSTEM = 3,     /* system event: `system_code` */
	TB_FEED_EV_STALE = 4,      /* `instrument`'s book lost data: `seq` is
				      the first sequence given up */
} tb_feed_ev_kind_t;

typedef struct tb_feed_event {
	uint32_t kind;            /* tb_feed_ev_kind_t */
	uint32_t instrument;
	uint64_t seq;             /* MoldUDP64 sequence of the message */
	uint64_t feed_receive_ns; /* receive time of its packet */
	uint64_t exch_ns;         /* ITCH timestamp, ns since midnight */
	tb_book_event_t book;     /* TB_FEED_EV_BOOK */
	char symbol[8];           /* TB_FEED_EV_INSTRUMENT, space padded */
	uint8_t system_code;      /* TB_FEED_EV_SYSTEM */
	uint8_t pad_[7];
} tb_feed_event_t;

typedef void (*tb_feed_cb_t)(void *ctx, const tb_feed_event_t *ev);
/* Called after every message is applied (or skipped as malformed), with
 * its sequence: the book is then consistent with every message up to it. */
typedef void (*tb_feed_applied_cb_t)(void *ctx, uint64_t seq);

/* Lines: A (the group of cfg.group) and B (cfg.group_b). */
#define TB_FEED_LINES 2
/* First arrivals remembered for arbitration: a copy later than this many
 * packets is taken for a first one (and, being behind, dropped as a
 * duplicate anyway). */
#define TB_FEED_ARB_SLOTS 4096

typedef struct tb_feed_cfg {
	const char *group;        /* IPv4 multicast group (or a local unicast
				     address) of the live feed */
	uint16_t port;
	const char *group_b;      /* line B's group (NULL: one line only) */
	uint16_t port_b;
	const char *iface;        /* IPv4 address of the interface to join on
				     (NULL: any) */
	const char *retrans_host; /* retransmission server (NULL: none) */
	uint16_t retrans_port;
	uint64_t first_seq;       /* first sequence expected; 0 = whatever the
				     first packet carries (late join) */
	const char *session;      /* MoldUDP64 session to accept (1..10
				     chars, space padded); NULL = the first
				     packet's */
	uint32_t max_instruments; /* book sizes (book.h) */
	uint32_t max_orders;
	uint32_t max_levels;
	uint32_t pending_max;     /* packets kept while a gap is open */
	uint16_t req_max;         /* messages per re-request */
	uint32_t gap_retries;     /* re-sends before the range is given up */
	uint64_t gap_timeout_ns;  /* first re-send timeout (then doubling) */
	uint64_t ab_wait_ns;      /* a hole on one line waits this long for
				     the other before it is re-requested */
	uint64_t line_timeout_ns; /* a line quiet this long is silent */
	int rcvbuf;               /* SO_RCVBUF bytes, 0 = leave alone */
	tb_feed_cb_t cb;
	tb_feed_applied_cb_t applied; /* may be NULL */
	void *ctx;
} tb_feed_cfg_t;

/* What one line did. */
typedef struct tb_feed_line_stats {
	uint64_t packets;         /* datagrams of the session it brought */
	uint64_t won;             /* messages applied from its packets: it
				     brought them first */
	uint64_t lost;            /* messages it brought second: dropped */
	uint64_t late_packets;    /* packets it brought second */
	uint64_t late_ns_sum;     /* how much later than the first copy */
	uint64_t late_ns_max;
	uint64_t silences;        /* times it fell silent */
	int silent;               /* silent now */
	int pad_;
	uint64_t last_ns;         /* last packet (tb_clock_now_ns) */
	uint64_t hi;              /* highest sequence it announced + 1 */
} tb_feed_line_stats_t;

typedef struct tb_feed_stats {
	uint64_t packets;            /* datagrams received, both sockets */
	uint64_t messages;           /* sequences consumed in order: applied,
					or skipped as malformed or unknown */
	uint64_t heartbeats;
	uint64_t duplicates;         /* messages received again, skipped */
	uint64_t malformed_packets;  /* failed tb_mold_parse(), or truncated */
	uint64_t malformed_by_kind[TB_MOLD_NERR]; /* index -(code) - 101,
						     TB_MOLD_E* */
	uint64_t malformed_messages; /* bad message in a good packet */
	uint64_t unknown_types;
	uint64_t wrong_session;
	uint64_t gaps;               /* gaps opened */
	uint64_t gaps_filled;        /* gaps closed by retransmission */
	uint64_t gaps_lost;          /* gaps given up */
	uint64_t requests;           /* re-request packets sent */
	uint64_t requested;          /* messages they asked for */
	uint64_t requested_new;      /* ... for the first time: what the
					lines lost (retries and answers
					cut short ask again) */
	uint64_t retrans_packets;    /* packets from the retransmission server */
	uint64_t lost_messages;      /* sequences given up */
	uint64_t stale_reports;      /* STALE events */
	uint64_t pending_dropped;    /* out-of-order packets not kept */
	uint64_t book_errors;        /* messages the book refused */
	uint64_t next_seq;           /* next sequence to apply */
	uint64_t end_seq;            /* end of session's sequence, 0 = none */
	int lines;                   /* 1, or 2 with line B */
	tb_feed_line_stats_t line[TB_FEED_LINES];
} tb_feed_stats_t;

typedef struct tb_feed tb_feed_t;

/* Fills `cfg` with the defaults: any interface, one line, late join, 1024
 * instruments, 1M orders, 256 levels, 1024 pending packets, 1024 messages
 * per request, 5 retries from 20 ms, A/B wait 2 ms, line timeout 500 ms,
 * 4 MiB receive buffer (forced past rmem_max when the process may). */
void tb_feed_cfg_init(tb_feed_cfg_t *cfg);

/* Opens the sockets, joins the group and allocates everything (books,
 * buffers).  Returns 0 or a TB_E* code with a message in
 * tb_md_error_msg() (md_error.h). */
int tb_feed_open(tb_feed_t **out, const tb_feed_cfg_t *cfg);
void tb_feed_close(tb_feed_t *f);

/* Busy-poll step: reads what is waiting on every socket (non-blocking,
 * one recvmmsg batch each), applies it, runs the gap and line timers.  Returns the
 * number of messages applied (0 = nothing new), or a TB_E* code (TB_ESYS
 * mostly) with a message in tb_md_error_msg() if a socket failed.  No
 * allocation or lock; the system calls are the receives and, during a gap,
 * the requests. */
int tb_feed_poll(tb_feed_t *f);

/* 1 once the end of session has been received and every sequence before
 * it applied (or given up). */
int tb_feed_ended(const tb_feed_t *f);

/* 1 if `instrument` was reported stale. */
int tb_feed_stale(const tb_feed_t *f, uint32_t instrument);

void tb_feed_stats(const tb_feed_t *f, tb_feed_stats_t *out);

/* The books, for reads (tb_book_levels, tb_book_checksum). */
const tb_book_t *tb_feed_book(const tb_feed_t *f);

/* The local port of the live socket (useful when cfg.port was 0). */
uint16_t tb_feed_port(const tb_feed_t *f);
/* The same for line `line` (0 = A, 1 = B); 0 when there is no such line. */
uint16_t tb_feed_line_port(const tb_feed_t *f, int line);

#endif
