/*
 * feed.c - MoldUDP64 feed handling: sequence, gaps, re-requests, books.
 *
 * State: `next` is the next sequence to apply; `hi` the highest sequence
 * any packet has announced (seq + count of data, seq of a heartbeat or end
 * of session).  While next < hi a gap is open: the packets past `next` wait
 * in `pending`, and one re-request is outstanding for [next, req_end).
 * Everything the gap path needs is allocated at open.
 *
 * Lines: packets come from `fd[0]` (line A), `fd[1]` (line B, or -1) and
 * `rfd` (answers to re-requests).  `arb` remembers the first arrival of
 * each recent packet; a second copy from the other line is dropped before
 * anything else looks at it.  A gap is opened (and re-requested) only once
 * every line that is not silent has announced a sequence past `next`, or
 * `ab_wait_ns` after the hole was first seen.
 */
#include "tools/md/feed.h"

#include "tools/md/md_error.h"
#include "tools/md/md_mem.h"

#include <tickbus/tickbus.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define unlikely(x) __builtin_expect(!!(x), 0)

/* Receive batch per socket and poll: 16 datagrams amortise the system call
 * without holding a fresh packet back for long. */
#define FEED_BATCH 16
/* A datagram buffer: larger than any MoldUDP64 packet we build
 * (TB_MOLD_MAX_PKT); anything longer arrives truncated and is counted. */
#define FEED_BUF 2048
/* Answers to re-requests: not a line. */
#define SRC_RETRANS TB_FEED_LINES

/* A packet kept while a gap is open.  The packets live in fixed slots;
 * a min-heap of (seq, slot) orders them, so that the next one to apply,
 * and the lowest sequence held, are found without touching the packet
 * bodies. */
typedef struct pending {
	uint64_t recv_ns;
	uint32_t len;
	uint32_t src;        /* the line it came on, or SRC_RETRANS */
	uint8_t data[FEED_BUF];
} pending_t;

typedef struct pend_ref {
	uint64_t seq;
	uint32_t slot;
	uint32_t pad_;
} pend_ref_t;

/* The first copy of a recent packet: its sequence, count, line and time. */
typedef struct arb_slot {
	uint64_t seq;
	uint64_t ns;
	uint16_t count;
	uint8_t line;
	uint8_t pad_[5];
} arb_slot_t;

struct tb_feed {
	tb_feed_cfg_t cfg;
	int fd[TB_FEED_LINES]; /* live multicast, A and B (or -1) */
	int nlines;
	int rfd;             /* retransmission requests and answers, or -1 */
	tb_book_t *book;
	tb_feed_stats_t st;
	char session[TB_MOLD_SESSION_LEN];
	int session_set;     /* from cfg.session, or the first packet */
	int started;         /* a packet of the session was seen */
	uint64_t next;
	uint64_t hi;
	int ended;
	/* The open gap. */
	int gap_open;
	uint64_t req_seq, req_end, deadline_ns, timeout_ns;
	uint32_t retries;
	/* A hole not yet re-requested: where, and since when. */
	uint64_t hole_at, hole_ns;
	uint64_t asked_end;  /* everything below was asked for once */
	arb_slot_t *arb;     /* TB_FEED_ARB_SLOTS first arrivals */
	/* The pending packets, their heap, the free slots, the per-instrument
	 * flags and the receive buffers share one pre-faulted, locked region
	 * (md_mem.h): the first gap takes no page fault. */
	tb_md_mem_t mem;
	/* Out-of-order packets. */
	pending_t *pending;
	pend_ref_t *heap;     /* min-heap by seq, npending entries */
	uint32_t *free_slots; /* stack of free slots */
	uint32_t npending, nfree;
	/* Per instrument: seen (1) and stale (2) flags. */
	uint8_t *inst;
	/* recvmmsg buffers. */
	struct mmsghdr msgs[FEED_BATCH];
	struct iovec iov[FEED_BATCH];
	uint8_t (*bufs)[FEED_BUF];
	/* The message being applied, for the book callback. */
	tb_feed_event_t cur;
};

void tb_feed_cfg_init(tb_feed_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_instruments = 1024;
	cfg->max_orders = 1u << 20;
	cfg->max_levels = 256;
	cfg->pending_max = 1024;
	cfg->req_max = 1024;
	cfg->gap_retries = 5;
	cfg->gap_timeout_ns = 20000000ull;
	cfg->ab_wait_ns = 2000000ull;
	cfg->line_timeout_ns = 500000000ull;
	cfg->rcvbuf = 4 << 20;
}

/* ------------------------------------------------------------ events */

static void on_book(void *ctx, const tb_book_event_t *ev)
{
	tb_feed_t *f = ctx;

	f->cur.kind = TB_FEED_EV_BOOK;
	f->cur.instrument = ev->instrument;
	f->cur.book = *ev;
	f->cfg.cb(f->cfg.ctx, &f->cur);
}

static void emit_plain(tb_feed_t *f, uint32_t kind, uint32_t instrument)
{
	if (!f->cfg.cb)
		return;
	f->cur.kind = kind;
	f->cur.instrument = instrument;
	f->cfg.cb(f->cfg.ctx, &f->cur);
}

/* ---------------------------------------------------------- messages */

static void apply_msg(tb_feed_t *f, const uint8_t *msg, size_t len,
		      uint64_t seq, uint64_t recv_ns)
{
	tb_itch_msg_t m;
	int rc = tb_itch_decode(msg, len, &m);

	f->st.messages++;
	if (unlikely(rc < 0)) {
		if (rc == TB_ITCH_ETYPE)
			f->st.unknown_types++;
		else
			f->st.malformed_messages++;
		return;
	}
	f->cur.seq = seq;
	f->cur.feed_receive_ns = recv_ns;
	f->cur.exch_ns = m.timestamp;
	switch (m.type) {
	case TB_ITCH_SYSTEM_EVENT:
		f->cur.system_code = m.u.sys.code;
		emit_plain(f, TB_FEED_EV_SYSTEM, m.locate);
		return;
	case TB_ITCH_STOCK_DIRECTORY:
		if (m.locate >= f->cfg.max_instruments) {
			f->st.book_errors++;
			return;
		}
		f->inst[m.locate] |= 1;
		memcpy(f->cur.symbol, m.u.dir.stock, 8);
		emit_plain(f, TB_FEED_EV_INSTRUMENT, m.locate);
		return;
	case TB_ITCH_ADD_ORDER:
	case TB_ITCH_ADD_ORDER_MPID:
		if (m.locate < f->cfg.max_instruments)
			f->inst[m.locate] |= 1;
		rc = tb_book_add(f->book, m.locate, m.u.add.ref,
				 m.u.add.side == 'B' ? TB_BOOK_BID : TB_BOOK_ASK,
				 m.u.add.price, m.u.add.shares);
		break;
	case TB_ITCH_ORDER_EXECUTED:
	case TB_ITCH_ORDER_EXECUTED_PRICE:
		rc = tb_book_execute(f->book, m.u.exec.ref, m.u.exec.shares,
				     m.u.exec.price, m.u.exec.match);
		break;
	case TB_ITCH_ORDER_CANCEL:
		rc = tb_book_cancel(f->book, m.u.cancel.ref, m.u.cancel.shares);
		break;
	case TB_ITCH_ORDER_DELETE:
		rc = tb_book_delete(f->book, m.u.del.ref);
		break;
	case TB_ITCH_ORDER_REPLACE:
		rc = tb_book_replace(f->book, m.u.replace.orig_ref,
				     m.u.replace.new_ref, m.u.replace.shares,
				     m.u.replace.price);
		break;
	case TB_ITCH_TRADE:
		rc = tb_book_trade(f->book, m.locate,
				   m.u.trade.side == 'B' ? TB_BOOK_BID : TB_BOOK_ASK,
				   m.u.trade.price, m.u.trade.shares,
				   m.u.trade.match);
		break;
	}
	if (unlikely(rc < 0))
		f->st.book_errors++;
}

/* Applies the messages of a parsed data packet from sequence f->next on.
 * Returns how many were applied. */
static int apply_pkt(tb_feed_t *f, const tb_mold_pkt_t *p, uint64_t recv_ns)
{
	size_t off = 0, len;
	const uint8_t *msg;
	uint64_t seq = p->seq;
	int n = 0;

	while (tb_mold_next(p, &off, &msg, &len)) {
		if (seq == f->next) {
			apply_msg(f, msg, len, seq, recv_ns);
			f->next++;
			n++;
			if (f->cfg.applied)
				f->cfg.applied(f->cfg.ctx, seq);
		} else if (seq < f->next) {
			f->st.duplicates++;
		}
		seq++;
	}
	return n;
}

static void heap_push(tb_feed_t *f, uint64_t seq, uint32_t slot)
{
	uint32_t i = f->npending++;

	while (i > 0) {
		uint32_t up = (i - 1) / 2;

		if (f->heap[up].seq <= seq)
			break;
		f->heap[i] = f->heap[up];
		i = up;
	}
	f->heap[i].seq = seq;
	f->heap[i].slot = slot;
}

static void heap_pop(tb_feed_t *f)
{
	pend_ref_t last = f->heap[--f->npending];
	uint32_t i = 0, n = f->npending;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && f->heap[c + 1].seq < f->heap[c].seq)
			c++;
		if (last.seq <= f->heap[c].seq)
			break;
		f->heap[i] = f->heap[c];
		i = c;
	}
	if (n)
		f->heap[i] = last;
}

/* Counts what a packet from `src` applied as won by its line. */
static inline int won(tb_feed_t *f, uint32_t src, int n)
{
	if (src != SRC_RETRANS)
		f->st.line[src].won += (uint64_t)n;
	return n;
}

/* Applies, in order, every kept packet that now continues the sequence
 * (and discards those wholly behind it). */
static int drain_pending(tb_feed_t *f)
{
	int n = 0;

	while (f->npending && f->heap[0].seq <= f->next) {
		uint32_t slot = f->heap[0].slot;
		pending_t *q = &f->pending[slot];
		tb_mold_pkt_t p;

		heap_pop(f);
		/* Parsed when it was kept: cannot fail now. */
		if (tb_mold_parse(q->data, q->len, &p) == 0)
			n += won(f, q->src, apply_pkt(f, &p, q->recv_ns));
		f->free_slots[f->nfree++] = slot;
	}
	return n;
}

/* Keeps a packet beyond `next`; 0, or -1 when there is no room. */
static int keep_pending(tb_feed_t *f, const void *data, size_t len,
			uint64_t seq, uint64_t recv_ns, uint32_t src)
{
	uint32_t slot;
	pending_t *q;

	if (!f->nfree || len > FEED_BUF) {
		f->st.pending_dropped++;
		return -1;
	}
	slot = f->free_slots[--f->nfree];
	q = &f->pending[slot];
	memcpy(q->data, data, len);
	q->len = (uint32_t)len;
	q->recv_ns = recv_ns;
	q->src = src;
	heap_push(f, seq, slot);
	return 0;
}

/* Lowest sequence held, or `hi` if none. */
static uint64_t pending_low(const tb_feed_t *f)
{
	return f->npending ? f->heap[0].seq : f->hi;
}

/* -------------------------------------------------------------- gaps */

static void send_request(tb_feed_t *f, uint64_t now)
{
	uint8_t req[TB_MOLD_REQ_LEN];
	ssize_t n;
	/* The first hole only: what is held is not asked for again. */
	uint64_t want = pending_low(f) - f->next;

	if (want > f->cfg.req_max)
		want = f->cfg.req_max;
	if (want == 0)
		want = 1;
	f->req_seq = f->next;
	f->req_end = f->next + want;
	f->deadline_ns = now + f->timeout_ns;
	if (f->rfd < 0)
		return;
	tb_mold_req_encode(req, f->session, f->req_seq, (uint16_t)want);
	n = send(f->rfd, req, sizeof(req), MSG_DONTWAIT);
	/* A refusal here is the ICMP answer to an earlier request, reported
	 * now: this request itself has not been sent yet. */
	if (n < 0 && errno == ECONNREFUSED)
		n = send(f->rfd, req, sizeof(req), MSG_DONTWAIT);
	if (n == (ssize_t)sizeof(req)) {
		f->st.requests++;
		f->st.requested += want;
		if (f->req_end > f->asked_end) {
			f->st.requested_new += f->req_end -
				(f->req_seq > f->asked_end ? f->req_seq : f->asked_end);
			f->asked_end = f->req_end;
		}
	}
}

/* 1 when the hole at `next` is one every line missed: each line that is
 * not silent has announced a sequence beyond it, or the hole has waited
 * ab_wait_ns for the others. */
static int both_missed(tb_feed_t *f, uint64_t now)
{
	if (f->hole_at != f->next) {
		f->hole_at = f->next;
		f->hole_ns = now;
	}
	if (now - f->hole_ns >= f->cfg.ab_wait_ns)
		return 1;
	for (int l = 0; l < f->nlines; l++)
		if (!f->st.line[l].silent && f->st.line[l].hi <= f->next)
			return 0;
	return 1;
}

/* Gives up [next, first held or hi): reports every instrument seen as
 * stale, clears the books and carries on from there. */
static int give_up(tb_feed_t *f)
{
	uint64_t to = pending_low(f), from = f->next;
	uint32_t i;

	f->st.gaps_lost++;
	f->st.lost_messages += to - f->next;
	f->next = to;
	f->gap_open = 0;
	for (i = 0; i < f->cfg.max_instruments; i++)
		if (f->inst[i] & 1) {
			f->inst[i] |= 2;
			f->st.stale_reports++;
			memset(&f->cur, 0, sizeof(f->cur));
			f->cur.seq = from;
			f->cur.feed_receive_ns = tb_clock_now_ns();
			emit_plain(f, TB_FEED_EV_STALE, i);
		}
	tb_book_clear(f->book, UINT32_MAX);
	return drain_pending(f);
}

/* Opens, advances or closes the gap after a change; runs the timers. */
static int check_gap(tb_feed_t *f, uint64_t now)
{
	if (f->next >= f->hi) {
		if (f->gap_open) {
			f->gap_open = 0;
			f->st.gaps_filled++;
		}
		return 0;
	}
	if (!f->gap_open) {
		if (!both_missed(f, now))
			return 0; /* another line may still bring it */
		f->gap_open = 1;
		f->st.gaps++;
		f->retries = 0;
		f->timeout_ns = f->cfg.gap_timeout_ns;
		send_request(f, now);
		return 0;
	}
	if (f->next >= f->req_end) { /* answered: ask for the rest */
		f->retries = 0;
		f->timeout_ns = f->cfg.gap_timeout_ns;
		send_request(f, now);
		return 0;
	}
	if ((int64_t)(now - f->deadline_ns) < 0)
		return 0;
	if (f->next > f->req_seq) { /* partly answered: ask for the rest */
		f->retries = 0;
		f->timeout_ns = f->cfg.gap_timeout_ns;
		send_request(f, now);
		return 0;
	}
	if (f->retries >= f->cfg.gap_retries || f->rfd < 0)
		return give_up(f);
	f->retries++;
	f->timeout_ns *= 2;
	send_request(f, now);
	return 0;
}

/* ------------------------------------------------------------ packets */

/* A data packet from line `l`: 1 if it is the second copy of one the
 * other line brought first (counted, to be dropped), else 0 (remembered
 * as a first copy; what it wins is counted once it is applied or kept). */
static int arbitrate(tb_feed_t *f, const tb_mold_pkt_t *p, int l,
		     uint64_t recv_ns)
{
	arb_slot_t *a = &f->arb[p->seq & (TB_FEED_ARB_SLOTS - 1)];
	tb_feed_line_stats_t *ls = &f->st.line[l];
	uint64_t end = p->seq + p->count;

	if (a->seq == p->seq && a->count == p->count && a->line != l) {
		uint64_t late = recv_ns > a->ns ? recv_ns - a->ns : 0;

		ls->lost += p->count;
		ls->late_packets++;
		ls->late_ns_sum += late;
		if (late > ls->late_ns_max)
			ls->late_ns_max = late;
		return 1;
	}
	(void)end;
	a->seq = p->seq;
	a->count = p->count;
	a->line = (uint8_t)l;
	a->ns = recv_ns;
	return 0;
}

static int on_packet(tb_feed_t *f, const uint8_t *data, size_t len,
		     uint64_t recv_ns, int src)
{
	tb_mold_pkt_t p;
	int rc = tb_mold_parse(data, len, &p);
	uint64_t end;

	f->st.packets++;
	if (unlikely(rc < 0)) {
		f->st.malformed_packets++;
		f->st.malformed_by_kind[-rc - 101]++;
		return 0;
	}
	if (unlikely(!f->session_set)) {
		memcpy(f->session, p.session, TB_MOLD_SESSION_LEN);
		f->session_set = 1;
	} else if (unlikely(memcmp(f->session, p.session,
				      TB_MOLD_SESSION_LEN) != 0)) {
		f->st.wrong_session++;
		return 0;
	}
	if (unlikely(!f->started)) {
		f->started = 1;
		/* Every line is live from the feed's start until it has been
		 * quiet too long. */
		for (int l = 0; l < f->nlines; l++)
			f->st.line[l].last_ns = recv_ns;
		if (f->next == 0)
			f->next = p.seq;
		if (f->hi < f->next)
			f->hi = f->next;
	}
	if (src == SRC_RETRANS) {
		f->st.retrans_packets++;
	} else {
		tb_feed_line_stats_t *ls = &f->st.line[src];
		uint64_t hi = p.count == TB_MOLD_COUNT_HEARTBEAT ||
			      p.count == TB_MOLD_COUNT_END ? p.seq : p.seq + p.count;

		ls->packets++;
		ls->last_ns = recv_ns;
		ls->silent = 0;
		if (hi > ls->hi)
			ls->hi = hi;
		if (p.count != TB_MOLD_COUNT_HEARTBEAT &&
		    p.count != TB_MOLD_COUNT_END && f->nlines > 1 &&
		    arbitrate(f, &p, src, recv_ns)) {
			f->st.duplicates += p.count;
			return 0;
		}
	}
	if (p.count == TB_MOLD_COUNT_HEARTBEAT || p.count == TB_MOLD_COUNT_END) {
		if (p.count == TB_MOLD_COUNT_END) {
			f->ended = 1;
			f->st.end_seq = p.seq;
		} else {
			f->st.heartbeats++;
		}
		if (p.seq > f->hi)
			f->hi = p.seq;
		return 0;
	}
	end = p.seq + p.count;
	if (end > f->hi)
		f->hi = end;
	if (end <= f->next) {
		f->st.duplicates += p.count;
		return 0;
	}
	if (p.seq > f->next) {
		/* Not kept: the other line's copy is not a second one. */
		if (keep_pending(f, data, len, p.seq, recv_ns, (uint32_t)src) < 0 &&
		    src != SRC_RETRANS)
			f->arb[p.seq & (TB_FEED_ARB_SLOTS - 1)].seq = 0;
		return 0;
	}
	rc = won(f, (uint32_t)src, apply_pkt(f, &p, recv_ns));
	if (f->npending)
		rc += drain_pending(f);
	return rc;
}

static int read_socket(tb_feed_t *f, int fd, int src)
{
	int n, i, applied = 0;
	uint64_t now;

	/* The headers were set at open; the kernel only writes msg_len and
	 * msg_flags back. */
	n = recvmmsg(fd, f->msgs, FEED_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
		    errno == ECONNREFUSED)
			return 0;
		return tb_md_error_sys(errno, "feed: recvmmsg");
	}
	now = tb_clock_now_ns();
	for (i = 0; i < n; i++) {
		if (unlikely(f->msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) {
			f->st.packets++;
			f->st.malformed_packets++;
			continue;
		}
		applied += on_packet(f, f->bufs[i], f->msgs[i].msg_len, now,
				     src);
	}
	return applied;
}

/* Lines quiet for line_timeout_ns fall silent. */
static void check_lines(tb_feed_t *f, uint64_t now)
{
	for (int l = 0; l < f->nlines; l++) {
		tb_feed_line_stats_t *ls = &f->st.line[l];

		if (!ls->silent && now - ls->last_ns > f->cfg.line_timeout_ns) {
			ls->silent = 1;
			ls->silences++;
		}
	}
}

int tb_feed_poll(tb_feed_t *f)
{
	int n = 0, r;
	uint64_t now;

	for (int l = 0; l < f->nlines; l++) {
		r = read_socket(f, f->fd[l], l);
		if (r < 0)
			return r;
		n += r;
	}
	if (f->rfd >= 0) {
		r = read_socket(f, f->rfd, SRC_RETRANS);
		if (r < 0)
			return r;
		n += r;
	}
	if (!f->started)
		return n;
	now = tb_clock_now_ns();
	check_lines(f, now);
	return n + check_gap(f, now);
}

/* ------------------------------------------------------------ set-up */

static int parse_addr(const char *s, uint16_t port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	if (!s)
		sa->sin_addr.s_addr = htonl(INADDR_ANY);
	else if (inet_pton(AF_INET, s, &sa->sin_addr) != 1)
		return tb_md_error_set(TB_EINVAL,
				       "feed: '%s' is not an IPv4 address", s);
	return 0;
}

/* Opens line `l`'s socket on `addr`:`port`. */
static int open_live(tb_feed_t *f, int l, const char *addr, uint16_t port)
{
	struct sockaddr_in group, iface;
	int one = 1, rc, fd;

	rc = parse_addr(addr, port, &group);
	if (rc == 0)
		rc = parse_addr(f->cfg.iface, 0, &iface);
	if (rc)
		return rc;
	fd = f->fd[l] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return tb_md_error_sys(errno, "feed: socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* Past net.core.rmem_max when privileged, else as far as allowed. */
	if (f->cfg.rcvbuf > 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &f->cfg.rcvbuf,
		       sizeof(f->cfg.rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &f->cfg.rcvbuf,
			   sizeof(f->cfg.rcvbuf));
	/* Bound to the group itself, the socket sees that group only. */
	if (bind(fd, (struct sockaddr *)&group, sizeof(group)) < 0)
		return tb_md_error_sys(errno, "feed: line %c: bind %s:%u",
				       'A' + l, addr, port);
	if (IN_MULTICAST(ntohl(group.sin_addr.s_addr))) {
		struct ip_mreqn mr;

		memset(&mr, 0, sizeof(mr));
		mr.imr_multiaddr = group.sin_addr;
		mr.imr_address = iface.sin_addr;
		if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr,
			       sizeof(mr)) < 0)
			return tb_md_error_sys(errno, "feed: line %c: join %s on %s",
					       'A' + l, addr,
					       f->cfg.iface ? f->cfg.iface : "any");
	}
	return 0;
}

static int open_retrans(tb_feed_t *f)
{
	struct sockaddr_in sa;
	int rc;

	if (!f->cfg.retrans_host)
		return 0;
	rc = parse_addr(f->cfg.retrans_host, f->cfg.retrans_port, &sa);
	if (rc)
		return rc;
	if (f->cfg.retrans_port == 0)
		return tb_md_error_set(TB_EINVAL, "feed: retransmission port 0");
	f->rfd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f->rfd < 0)
		return tb_md_error_sys(errno, "feed: socket");
	/* Connected: answers from anyone else are not ours to read. */
	if (connect(f->rfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return tb_md_error_sys(errno, "feed: connect %s:%u",
				       f->cfg.retrans_host, f->cfg.retrans_port);
	return 0;
}

int tb_feed_open(tb_feed_t **out, const tb_feed_cfg_t *cfg)
{
	tb_feed_t *f;
	tb_book_cfg_t bc;
	int rc;

	*out = NULL;
	if (!cfg || !cfg->group)
		return tb_md_error_set(TB_EINVAL, "feed: no group address");
	if (cfg->pending_max == 0 || cfg->req_max == 0 ||
	    cfg->req_max == TB_MOLD_COUNT_END || cfg->gap_timeout_ns == 0)
		return tb_md_error_set(TB_EINVAL,
				       "feed: pending_max, req_max (< 65535) and "
				       "gap_timeout_ns must be > 0");
	f = calloc(1, sizeof(*f));
	if (!f)
		return tb_md_error_set(TB_ENOMEM, "feed: out of memory");
	f->cfg = *cfg;
	f->fd[0] = f->fd[1] = f->rfd = -1;
	f->nlines = cfg->group_b ? 2 : 1;
	f->st.lines = f->nlines;
	if (cfg->session) {
		size_t n = strlen(cfg->session);

		if (n == 0 || n > TB_MOLD_SESSION_LEN) {
			rc = tb_md_error_set(TB_EINVAL, "feed: session '%s' is "
					     "not 1..10 characters", cfg->session);
			goto fail;
		}
		memset(f->session, ' ', TB_MOLD_SESSION_LEN);
		memcpy(f->session, cfg->session, n);
		f->session_set = 1;
	}
	f->next = cfg->first_seq;
	f->hi = cfg->first_seq;
	bc.max_instruments = cfg->max_instruments;
	bc.max_orders = cfg->max_orders;
	bc.max_levels = cfg->max_levels;
	rc = tb_book_create(&f->book, &bc);
	if (rc) {
		tb_md_error_prepend(rc, "feed");
		goto fail;
	}
	if (cfg->cb)
		tb_book_set_cb(f->book, on_book, f);
	{
		/* Every part is a multiple of 8 bytes, so each stays aligned. */
		size_t p_bytes = (size_t)cfg->pending_max * sizeof(*f->pending);
		size_t h_bytes = (size_t)cfg->pending_max * sizeof(*f->heap);
		size_t s_bytes = ((size_t)cfg->pending_max * sizeof(*f->free_slots)
				  + 7) & ~(size_t)7;
		size_t b_bytes = (size_t)FEED_BATCH * FEED_BUF;
		size_t a_bytes = TB_FEED_ARB_SLOTS * sizeof(arb_slot_t);
		size_t i_bytes = cfg->max_instruments;
		char *base;

		rc = tb_md_mem_alloc(&f->mem, p_bytes + h_bytes + s_bytes +
				     b_bytes + a_bytes + i_bytes);
		if (rc) {
			tb_md_error_prepend(rc, "feed: %u pending packets",
					    cfg->pending_max);
			goto fail;
		}
		base = f->mem.addr;
		f->pending = (pending_t *)base;
		f->heap = (pend_ref_t *)(base + p_bytes);
		f->free_slots = (uint32_t *)(base + p_bytes + h_bytes);
		f->bufs = (uint8_t (*)[FEED_BUF])(base + p_bytes + h_bytes + s_bytes);
		f->arb = (arb_slot_t *)(base + p_bytes + h_bytes + s_bytes + b_bytes);
		f->inst = (uint8_t *)(base + p_bytes + h_bytes + s_bytes + b_bytes +
				      a_bytes);
	}
	for (int i = 0; i < FEED_BATCH; i++) {
		f->iov[i].iov_base = f->bufs[i];
		f->iov[i].iov_len = FEED_BUF;
		f->msgs[i].msg_hdr.msg_iov = &f->iov[i];
		f->msgs[i].msg_hdr.msg_iovlen = 1;
	}
	for (f->nfree = 0; f->nfree < cfg->pending_max; f->nfree++)
		f->free_slots[f->nfree] = cfg->pending_max - 1 - f->nfree;
	rc = open_live(f, 0, cfg->group, cfg->port);
	if (rc == 0 && cfg->group_b)
		rc = open_live(f, 1, cfg->group_b, cfg->port_b);
	if (rc == 0)
		rc = open_retrans(f);
	if (rc)
		goto fail;
	*out = f;
	return 0;
fail:
	tb_feed_close(f);
	return rc;
}

void tb_feed_close(tb_feed_t *f)
{
	if (!f)
		return;
	for (int l = 0; l < TB_FEED_LINES; l++)
		if (f->fd[l] >= 0)
			close(f->fd[l]);
	if (f->rfd >= 0)
		close(f->rfd);
	tb_book_destroy(f->book);
	tb_md_mem_free(&f->mem);
	free(f);
}

int tb_feed_ended(const tb_feed_t *f)
{
	return f->ended && f->next >= f->st.end_seq;
}

int tb_feed_stale(const tb_feed_t *f, uint32_t instrument)
{
	return instrument < f->cfg.max_instruments && (f->inst[instrument] & 2);
}

void tb_feed_stats(const tb_feed_t *f, tb_feed_stats_t *out)
{
	*out = f->st;
	out->next_seq = f->next;
}

const tb_book_t *tb_feed_book(const tb_feed_t *f)
{
	return f->book;
}

uint16_t tb_feed_line_port(const tb_feed_t *f, int line)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);

	if (line < 0 || line >= f->nlines ||
	    getsockname(f->fd[line], (struct sockaddr *)&sa, &sl) < 0)
		return 0;
	return ntohs(sa.sin_port);
}

uint16_t tb_feed_port(const tb_feed_t *f)
{
	return tb_feed_line_port(f, 0);
}
