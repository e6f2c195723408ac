/*
 * tb-feedsim - an exchange simulator: a MoldUDP64-framed, ITCH 5.0-style
 * order-by-order feed over UDP multicast, with a retransmission server.
 *
 * The feed is a pure function of the seed: message contents, exchange
 * timestamps (9:30:00 plus 1 us per message) and the packing of messages
 * into packets come from two xorshift generators seeded from --seed, never
 * from the clock, so the same seed gives the same bytes (bytes_crc in the
 * summary says so).  Loss injection has its own generator (--drop-seed), so
 * dropping packets changes what is sent on the live path, not the feed.
 *
 * Lines A and B (--group-b): every packet goes out on both groups, as an
 * exchange's feed does, each line with its own seeded loss (--drop,
 * --drop-b) and jitter (--jitter-us, --jitter-b-us: each packet of the
 * line is held back a random 0..N us, in order); --b-silent-from and
 * --b-silent-to keep line B quiet (no data, no heartbeat) while those
 * sequences are sent, to play a line that goes down and comes back.  The
 * summary says what each line lost, and what both lost together: the
 * packets (dropped_both) and messages (dropped_both_msgs) a reader of both
 * lines must re-request.
 *
 * The simulator keeps every message it sent and answers MoldUDP64
 * re-requests on the retransmission port with ordinary downstream packets
 * (unicast, to the requester), at most --req-max messages per request.  A
 * request for sequences not yet sent gets nothing; a malformed request or
 * one for another session is counted as bad and gets nothing.
 *
 * It tracks its own live orders (the list it draws executions, cancels,
 * deletes and replaces from) and prints, at the end, the order count and
 * the order-state checksum of book.h (tb_book_order_hash summed over its
 * live orders) so that a feed handler can prove its books match.
 *
 * Summary line (stdout), parsed by the scenario tests:
 *   feedsim: messages=N packets=P dropped=D heartbeats=H requests=R
 *     bad_requests=B unknown_requests=U retrans_msgs=M last_seq=S
 *     orders=O checksum=0x... bytes_crc=0x... data_packets=N
 *     packets_b=N dropped_b=N dropped_both=N dropped_both_msgs=N
 *     silent_b=N
 * (packets, dropped: line A's; data_packets: distinct data packets made)
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"
#include "tools/hash.h"
#include "tools/md/book.h"
#include "tools/md/itch.h"
#include "tools/md/mold.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char prog[] = "tb-feedsim";
static volatile sig_atomic_t stop;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-feedsim [options]\n"
"Sends a MoldUDP64/ITCH 5.0-style feed over UDP multicast, answers\n"
"re-requests, and prints a summary line (see the top of tb-feedsim.c).\n"
"options:\n"
"  -g, --group ADDR        multicast group (or unicast address) to send to\n"
"                          (default 239.194.7.1)\n"
"  -p, --port PORT         its port (default 31001)\n"
"  -i, --iface ADDR        IPv4 address of the sending interface\n"
"                          (default: the route's choice)\n"
"      --ttl N             multicast TTL, 0..255 (default 1)\n"
"  -R, --retrans-port PORT retransmission port, 0 = none (default 31002)\n"
"      --retrans-bind ADDR address it listens on (default 0.0.0.0)\n"
"      --req-max N         messages answered per request, 1..65534\n"
"                          (default 2000)\n"
"  -N, --instruments N     instruments, 1..65534 (default 8)\n"
"  -n, --count N           order messages to send (default 100000)\n"
"  -d, --duration SEC      stop sending after this long (default: none)\n"
"  -r, --rate R            messages per second, 0 = flat out (default\n"
"                          100000)\n"
"      --burst-every N     every N messages, a burst... (default 0 = none)\n"
"      --burst-len N       ...of N messages sent without pacing (default 0)\n"
"      --max-per-pkt N     messages per packet drawn from 1..N (default 24)\n"
"      --max-orders N      live orders the simulator keeps at most\n"
"                          (default 20000)\n"
"  -s, --seed S            feed seed (default 1)\n"
"      --drop FRAC         drop this fraction of live data packets, 0..1\n"
"      --drop-seed S       seed of the drops (default: seed + 1)\n"
"      --group-b ADDR      line B: send every packet to this group too\n"
"      --port-b PORT       its port (default: --port)\n"
"      --drop-b FRAC       drop this fraction of line B's data packets\n"
"      --drop-seed-b S     seed of line B's drops (default: seed + 2)\n"
"      --jitter-us N       hold each line A packet back 0..N us (default 0)\n"
"      --jitter-b-us N     the same for line B (default 0)\n"
"      --jitter-seed S     seed of the jitter (default: seed + 3)\n"
"      --b-silent-from SEQ line B sends nothing while sequences SEQ..\n"
"      --b-silent-to SEQ   ...SEQ are sent (default: never)\n"
"      --session NAME      MoldUDP64 session, up to 10 chars (default\n"
"                          TBSIM00001)\n"
"      --heartbeat-ms MS   heartbeat when idle this long (default 100)\n"
"      --start-delay-ms MS heartbeats only, before the first data\n"
"                          (default 0)\n"
"      --end-ms MS         after the last message, send end of session and\n"
"                          answer re-requests this long (default 1000);\n"
"                          SIGINT/SIGTERM ends this phase at once\n"
"  -h, --help              this text\n");
}

/* ------------------------------------------------------------ helpers */

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static uint64_t seed_state(uint64_t seed)
{
	uint64_t s = tb_hash_mix64(seed + TB_HASH_GOLDEN);

	return s ? s : 1;
}

/* ------------------------------------------------------------ the feed */

typedef struct sim_order {
	uint64_t ref;
	uint32_t instr;
	uint8_t side; /* TB_BOOK_BID / TB_BOOK_ASK */
	int64_t price;
	uint64_t qty;
} sim_order_t;

/* A packet held back by a line's jitter. */
typedef struct held {
	uint64_t due_ns;
	uint32_t len;
	uint8_t data[TB_MOLD_MAX_PKT];
} held_t;

#define HELD_MAX 4096 /* per line; when full, a packet goes out at once */

typedef struct line {
	int on;
	double drop;
	uint64_t rng_drop, jitter_ns;
	struct sockaddr_in dst;
	held_t *q;            /* HELD_MAX, a ring; NULL without jitter */
	uint32_t head, n;
	uint64_t last_due;
	uint64_t packets, dropped;
} line_t;

typedef struct sim {
	/* options */
	uint32_t instruments, max_orders, max_per_pkt, req_max;
	uint64_t count, rate, burst_every, burst_len;
	char session[TB_MOLD_SESSION_LEN];
	/* generators */
	uint64_t rng_msg, rng_pkt;
	/* market state */
	int64_t *mid;
	sim_order_t *orders;
	uint32_t norders;
	uint64_t next_ref, match;
	/* every message sent, by sequence (1-based) */
	uint8_t *arena;
	size_t arena_len, arena_cap;
	size_t *off; /* off[seq] .. off[seq + 1] */
	size_t off_cap;
	uint64_t have; /* messages generated: sequences 1 .. have */
	uint64_t sent; /* messages sent on the live path (or dropped) */
	uint64_t order_msgs;
	/* sockets and lines: A (line[0]) and B */
	int fd, rfd;
	line_t line[2];
	uint64_t rng_jitter;
	uint64_t silent_from, silent_to, silent_b;
	/* counters */
	uint64_t heartbeats, requests, bad_requests, data_packets,
		 unknown_requests, retrans_msgs, retrans_pkts, bytes_crc,
		 dropped_both, dropped_both_msgs;
} sim_t;

#define TICK 100                      /* $0.01 with 4 implied decimals */
#define OPEN_NS 34200000000000ull     /* 9:30:00 in ns since midnight */

static void stock_name(uint32_t locate, char out[8])
{
	char buf[16];

	snprintf(buf, sizeof(buf), "SYM%-5u", locate);
	memcpy(out, buf, 8);
}

/* Appends message `m` as the next sequence, growing the store by doubling
 * (the simulator is not a hot path; the store only grows). */
static void store(sim_t *s, tb_itch_msg_t *m)
{
	int n;

	if (s->arena_cap - s->arena_len < 64 || s->have + 2 >= s->off_cap) {
		size_t acap = s->arena_cap * 2, ocap = s->off_cap * 2;
		uint8_t *a = realloc(s->arena, acap);
		size_t *o = a ? realloc(s->off, ocap * sizeof(*o)) : NULL;

		if (a)
			s->arena = a;
		if (!a || !o) {
			fprintf(stderr, "tb-feedsim: out of memory after %" PRIu64
				" messages\n", s->have);
			exit(1);
		}
		s->off = o;
		s->arena_cap = acap;
		s->off_cap = ocap;
	}
	m->tracking = 0;
	m->timestamp = OPEN_NS + (s->have + 1) * 1000;
	n = tb_itch_encode(m, s->arena + s->arena_len, s->arena_cap - s->arena_len);
	if (n < 0) { /* 64 bytes free hold the largest message: cannot be */
		fprintf(stderr, "tb-feedsim: encode: %s\n", tb_itch_strerror(n));
		exit(1);
	}
	s->arena_len += (size_t)n;
	s->have++;
	s->off[s->have + 1] = s->arena_len;
}

static void gen_system(sim_t *s, uint8_t code)
{
	tb_itch_msg_t m;

	memset(&m, 0, sizeof(m));
	m.type = TB_ITCH_SYSTEM_EVENT;
	m.u.sys.code = code;
	store(s, &m);
}

static void gen_directory(sim_t *s, uint32_t locate)
{
	tb_itch_msg_t m;

	memset(&m, 0, sizeof(m));
	m.type = TB_ITCH_STOCK_DIRECTORY;
	m.locate = (uint16_t)locate;
	stock_name(locate, m.u.dir.stock);
	m.u.dir.market_category = 'Q';
	m.u.dir.financial_status = 'N';
	m.u.dir.round_lot = 100;
	m.u.dir.round_lots_only = 'N';
	m.u.dir.issue_class = 'C';
	memcpy(m.u.dir.issue_subtype, "Z ", 2);
	m.u.dir.authenticity = 'P';
	m.u.dir.short_sale_threshold = 'N';
	m.u.dir.ipo_flag = ' ';
	m.u.dir.luld_tier = '1';
	m.u.dir.etp_flag = 'N';
	m.u.dir.inverse = 'N';
	store(s, &m);
}

static int64_t order_price(sim_t *s, uint32_t instr, int side)
{
	int64_t off = (int64_t)(1 + xorshift(&s->rng_msg) % 20) * TICK;

	return side == TB_BOOK_BID ? s->mid[instr] - off : s->mid[instr] + off;
}

/* One order-by-order message, drawn from the seeded generator. */
static void gen_order_msg(sim_t *s)
{
	uint64_t r = xorshift(&s->rng_msg) % 100;
	tb_itch_msg_t m;
	sim_order_t *o;
	uint32_t i;

	memset(&m, 0, sizeof(m));
	if (s->norders < 2 * s->instruments ||
	    (r < 40 && s->norders < s->max_orders)) {
		uint32_t instr = 1 + (uint32_t)(xorshift(&s->rng_msg) % s->instruments);
		int side = (int)(xorshift(&s->rng_msg) % 2);

		/* The mid walks a tick now and then. */
		if (xorshift(&s->rng_msg) % 16 == 0) {
			s->mid[instr] += xorshift(&s->rng_msg) % 2 ? TICK : -TICK;
			if (s->mid[instr] < 100 * TICK)
				s->mid[instr] = 100 * TICK;
		}
		o = &s->orders[s->norders++];
		o->ref = s->next_ref++;
		o->instr = instr;
		o->side = (uint8_t)side;
		o->price = order_price(s, instr, side);
		o->qty = 100 * (1 + xorshift(&s->rng_msg) % 10);
		m.type = r % 5 == 0 ? TB_ITCH_ADD_ORDER_MPID : TB_ITCH_ADD_ORDER;
		m.locate = (uint16_t)instr;
		m.u.add.ref = o->ref;
		m.u.add.side = side == TB_BOOK_BID ? 'B' : 'S';
		m.u.add.shares = (uint32_t)o->qty;
		stock_name(instr, m.u.add.stock);
		m.u.add.price = (uint32_t)o->price;
		memcpy(m.u.add.mpid, "TBSM", 4);
		store(s, &m);
		return;
	}
	i = (uint32_t)(xorshift(&s->rng_msg) % s->norders);
	o = &s->orders[i];
	m.locate = (uint16_t)o->instr;
	if (r < 55 || (r >= 90 && r < 94)) { /* execute, maybe with price */
		uint64_t q = 1 + xorshift(&s->rng_msg) % o->qty;

		m.type = r < 90 ? TB_ITCH_ORDER_EXECUTED : TB_ITCH_ORDER_EXECUTED_PRICE;
		m.u.exec.ref = o->ref;
		m.u.exec.shares = (uint32_t)q;
		m.u.exec.match = ++s->match;
		m.u.exec.printable = 'Y';
		m.u.exec.price = (uint32_t)(o->price + (o->side == TB_BOOK_BID ? -TICK : TICK));
		o->qty -= q;
	} else if (r < 68) { /* partial or full cancel */
		uint64_t q = 1 + xorshift(&s->rng_msg) % o->qty;

		m.type = TB_ITCH_ORDER_CANCEL;
		m.u.cancel.ref = o->ref;
		m.u.cancel.shares = (uint32_t)q;
		o->qty -= q;
	} else if (r < 80) {
		m.type = TB_ITCH_ORDER_DELETE;
		m.u.del.ref = o->ref;
		o->qty = 0;
	} else if (r < 90) {
		m.type = TB_ITCH_ORDER_REPLACE;
		m.u.replace.orig_ref = o->ref;
		m.u.replace.new_ref = s->next_ref++;
		o->ref = m.u.replace.new_ref;
		o->price = order_price(s, o->instr, o->side);
		o->qty = 100 * (1 + xorshift(&s->rng_msg) % 10);
		m.u.replace.shares = (uint32_t)o->qty;
		m.u.replace.price = (uint32_t)o->price;
	} else { /* a non-displayed trade: the book does not change */
		m.type = TB_ITCH_TRADE;
		m.u.trade.side = 'B';
		m.u.trade.shares = 100;
		stock_name(o->instr, m.u.trade.stock);
		m.u.trade.price = (uint32_t)s->mid[o->instr];
		m.u.trade.match = ++s->match;
	}
	if (o->qty == 0)
		s->orders[i] = s->orders[--s->norders];
	store(s, &m);
}

/* Packs messages from `seq` (up to `max` of them, none past `last`, and
 * what fits in one packet) into `pkt`; returns its length and the count in
 * `*n`. */
static size_t pack(const sim_t *s, uint8_t *pkt, uint64_t seq, uint64_t max,
		   uint64_t last, uint16_t *n)
{
	tb_mold_builder_t b;

	tb_mold_build_begin(&b, pkt, TB_MOLD_MAX_PKT, s->session, seq);
	while (b.count < max && seq <= last &&
	       tb_mold_build_add(&b, s->arena + s->off[seq],
				 s->off[seq + 1] - s->off[seq]) == 0)
		seq++;
	*n = b.count;
	return tb_mold_build_end(&b);
}

/* -------------------------------------------------------- retransmission */

static void serve_requests(sim_t *s)
{
	uint8_t buf[64], pkt[TB_MOLD_MAX_PKT];
	int k;

	if (s->rfd < 0)
		return;
	for (k = 0; k < 64; k++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t len = recvfrom(s->rfd, buf, sizeof(buf), MSG_DONTWAIT,
				       (struct sockaddr *)&from, &fl);
		tb_mold_req_t r;
		uint64_t seq, left;

		if (len < 0)
			return;
		s->requests++;
		if (tb_mold_req_decode(buf, (size_t)len, &r) != 0 ||
		    memcmp(r.session, s->session, TB_MOLD_SESSION_LEN) != 0) {
			s->bad_requests++;
			continue;
		}
		if (r.seq > s->sent) {
			s->unknown_requests++;
			continue;
		}
		left = r.count < s->req_max ? r.count : s->req_max;
		for (seq = r.seq; left > 0 && seq <= s->sent;) {
			uint16_t n;
			size_t plen = pack(s, pkt, seq, left, s->sent, &n);

			if (n == 0)
				break;
			sendto(s->rfd, pkt, plen, 0, (struct sockaddr *)&from, fl);
			s->retrans_msgs += n;
			s->retrans_pkts++;
			seq += n;
			left -= n;
		}
	}
}

/* --------------------------------------------------------------- sending */

static void line_out(sim_t *s, line_t *l, const uint8_t *pkt, size_t len)
{
	if (sendto(s->fd, pkt, len, 0, (struct sockaddr *)&l->dst,
		   sizeof(l->dst)) == (ssize_t)len)
		l->packets++;
}

/* Sends what a line's jitter held back and is due by `now`. */
static void flush_lines(sim_t *s, uint64_t now)
{
	for (int i = 0; i < 2; i++) {
		line_t *l = &s->line[i];

		while (l->n && l->q[l->head].due_ns <= now) {
			line_out(s, l, l->q[l->head].data, l->q[l->head].len);
			l->head = (l->head + 1) % HELD_MAX;
			l->n--;
		}
	}
}

/* A line's copy of a packet: dropped (data only), held back, or sent. */
static void line_send(sim_t *s, line_t *l, const uint8_t *pkt, size_t len,
		      uint64_t now)
{
	held_t *h;

	if (!l->q || !l->jitter_ns || l->n == HELD_MAX) {
		line_out(s, l, pkt, len);
		return;
	}
	h = &l->q[(l->head + l->n) % HELD_MAX];
	h->due_ns = now + xorshift(&s->rng_jitter) % (l->jitter_ns + 1);
	if (h->due_ns < l->last_due)
		h->due_ns = l->last_due; /* a line never reorders */
	l->last_due = h->due_ns;
	h->len = (uint32_t)len;
	memcpy(h->data, pkt, len);
	l->n++;
}

static int drop_draw(line_t *l)
{
	return l->drop > 0 &&
	       (double)(xorshift(&l->rng_drop) >> 11) * 0x1.0p-53 < l->drop;
}

/* 1 while line B is to keep quiet. */
static int b_silent(const sim_t *s)
{
	uint64_t next = s->sent + 1;

	return s->silent_to && next >= s->silent_from && next <= s->silent_to;
}

/* A packet to the live groups: `n` data messages (0: a control packet). */
static void send_live(sim_t *s, const uint8_t *pkt, size_t len, int data,
		      uint16_t n)
{
	uint64_t now = tb_clock_mono_ns();
	int drop[2] = {0, 0};

	if (data) {
		s->data_packets++;
		drop[0] = drop_draw(&s->line[0]);
		if (s->line[1].on)
			drop[1] = drop_draw(&s->line[1]);
	}
	for (int i = 0; i < 2; i++) {
		line_t *l = &s->line[i];

		if (!l->on)
			continue;
		if (i == 1 && b_silent(s)) {
			s->silent_b++;
			continue;
		}
		if (drop[i]) {
			l->dropped++;
			continue;
		}
		line_send(s, l, pkt, len, now);
	}
	if (drop[0] && (!s->line[1].on || drop[1] || b_silent(s))) {
		s->dropped_both++;
		s->dropped_both_msgs += n;
	}
	flush_lines(s, now);
}

static void send_ctl(sim_t *s, uint16_t count)
{
	uint8_t pkt[TB_MOLD_HDR_LEN];

	/* The next sequence to be sent, not generated: generation runs a
	 * little ahead of the wire. */
	tb_mold_write_ctl(pkt, s->session, s->sent + 1, count);
	send_live(s, pkt, sizeof(pkt), 0, 0);
	if (count == TB_MOLD_COUNT_HEARTBEAT)
		s->heartbeats++;
}

/* Sleeps up to `ns`, waking early when a re-request arrives (and for
 * at most 50 us while a line holds packets back). */
static void nap(const sim_t *s, uint64_t ns)
{
	struct timespec ts = { 0, (long)ns };
	struct pollfd p = { s->rfd, POLLIN, 0 };

	if ((s->line[0].n || s->line[1].n) && ns > 50000)
		ts.tv_nsec = 50000;

	if (s->rfd >= 0)
		ppoll(&p, 1, &ts, NULL);
	else
		nanosleep(&ts, NULL);
}

static int open_sockets(sim_t *s, const char *group, uint16_t port,
			const char *group_b, uint16_t port_b,
			const char *iface, int ttl, const char *rbind,
			uint16_t rport)
{
	struct in_addr ifa;
	unsigned char t = (unsigned char)ttl, loop = 1;

	for (int i = 0; i < 2; i++) {
		struct sockaddr_in *d = &s->line[i].dst;

		memset(d, 0, sizeof(*d));
		d->sin_family = AF_INET;
		d->sin_port = htons(i ? port_b : port);
		if (i == 1 && !group_b)
			break;
		if (inet_pton(AF_INET, i ? group_b : group, &d->sin_addr) != 1) {
			fprintf(stderr, "tb-feedsim: --group%s '%s' is not an IPv4 "
				"address\n", i ? "-b" : "", i ? group_b : group);
			return -1;
		}
		s->line[i].on = 1;
	}
	s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		perror("tb-feedsim: socket");
		return -1;
	}
	setsockopt(s->fd, IPPROTO_IP, IP_MULTICAST_TTL, &t, sizeof(t));
	setsockopt(s->fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop));
	if (iface) {
		if (inet_pton(AF_INET, iface, &ifa) != 1) {
			fprintf(stderr, "tb-feedsim: --iface '%s' is not an IPv4 address\n",
				iface);
			return -1;
		}
		if (setsockopt(s->fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa,
			       sizeof(ifa)) < 0) {
			fprintf(stderr, "tb-feedsim: --iface %s: %s\n", iface,
				strerror(errno));
			return -1;
		}
	}
	s->rfd = -1;
	if (rport) {
		struct sockaddr_in sa;
		int one = 1;

		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		sa.sin_port = htons(rport);
		if (inet_pton(AF_INET, rbind, &sa.sin_addr) != 1) {
			fprintf(stderr, "tb-feedsim: --retrans-bind '%s' is not an IPv4 address\n",
				rbind);
			return -1;
		}
		s->rfd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s->rfd < 0) {
			perror("tb-feedsim: socket");
			return -1;
		}
		setsockopt(s->rfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s->rfd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			fprintf(stderr, "tb-feedsim: bind %s:%u: %s\n", rbind,
				rport, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void sim_free(sim_t *s)
{
	if (s->fd >= 0)
		close(s->fd);
	if (s->rfd >= 0)
		close(s->rfd);
	free(s->off);
	free(s->arena);
	free(s->mid);
	free(s->orders);
	free(s->line[0].q);
	free(s->line[1].q);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"group", required_argument, 0, 'g'},
		{"port", required_argument, 0, 'p'},
		{"iface", required_argument, 0, 'i'},
		{"ttl", required_argument, 0, 'T'},
		{"retrans-port", required_argument, 0, 'R'},
		{"retrans-bind", required_argument, 0, 'B'},
		{"req-max", required_argument, 0, 'Q'},
		{"instruments", required_argument, 0, 'N'},
		{"count", required_argument, 0, 'n'},
		{"duration", required_argument, 0, 'd'},
		{"rate", required_argument, 0, 'r'},
		{"burst-every", required_argument, 0, 'E'},
		{"burst-len", required_argument, 0, 'L'},
		{"max-per-pkt", required_argument, 0, 'k'},
		{"max-orders", required_argument, 0, 'O'},
		{"seed", required_argument, 0, 's'},
		{"drop", required_argument, 0, 'x'},
		{"drop-seed", required_argument, 0, 'X'},
		{"group-b", required_argument, 0, 0x100},
		{"port-b", required_argument, 0, 0x101},
		{"drop-b", required_argument, 0, 0x102},
		{"drop-seed-b", required_argument, 0, 0x103},
		{"jitter-us", required_argument, 0, 0x104},
		{"jitter-b-us", required_argument, 0, 0x105},
		{"jitter-seed", required_argument, 0, 0x106},
		{"b-silent-from", required_argument, 0, 0x107},
		{"b-silent-to", required_argument, 0, 0x108},
		{"session", required_argument, 0, 'S'},
		{"heartbeat-ms", required_argument, 0, 'H'},
		{"start-delay-ms", required_argument, 0, 'D'},
		{"end-ms", required_argument, 0, 'Z'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *group = "239.194.7.1", *iface = NULL, *rbind = "0.0.0.0";
	const char *group_b = NULL;
	uint64_t port = 31001, rport = 31002, ttl = 1, seed = 1, drop_seed = 0;
	uint64_t port_b = 0, drop_seed_b = 0, jitter_seed = 0, jit[2] = {0, 0};
	int have_drop_seed_b = 0, have_jitter_seed = 0;
	uint64_t duration = 0, hb_ms = 100, start_ms = 0, end_ms = 1000, v;
	int have_drop_seed = 0, closing = 0, trailer = 0, c;
	sim_t s;
	uint64_t t0, next_due, last_send, burst_left = 0, since_burst = 0;
	uint8_t pkt[TB_MOLD_MAX_PKT];
	uint32_t i;

	memset(&s, 0, sizeof(s));
	s.fd = s.rfd = -1;
	s.instruments = 8;
	s.max_orders = 20000;
	s.max_per_pkt = 24;
	s.req_max = 2000;
	s.count = 100000;
	s.rate = 100000;
	memcpy(s.session, "TBSIM00001", TB_MOLD_SESSION_LEN);

	while ((c = getopt_long(argc, argv, "g:p:i:R:N:n:d:r:s:h", opts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'g': if (!tb_cli_is_ipv4(optarg)) bad = "--group"; else group = optarg; break;
		case 'i': if (!tb_cli_is_ipv4(optarg)) bad = "--iface"; else iface = optarg; break;
		case 'B': if (!tb_cli_is_ipv4(optarg)) bad = "--retrans-bind"; else rbind = optarg; break;
		case 'p': if (tb_cli_u64_c(optarg, &port) || port == 0 || port > 65535) bad = "--port"; break;
		case 'R': if (tb_cli_u64_c(optarg, &rport) || rport > 65535) bad = "--retrans-port"; break;
		case 'T': if (tb_cli_u64_c(optarg, &ttl) || ttl > 255) bad = "--ttl"; break;
		case 'Q': if (tb_cli_u64_c(optarg, &v) || v == 0 || v > 65534) bad = "--req-max"; else s.req_max = (uint32_t)v; break;
		case 'N': if (tb_cli_u64_c(optarg, &v) || v == 0 || v > 65534) bad = "--instruments"; else s.instruments = (uint32_t)v; break;
		case 'n': if (tb_cli_u64_c(optarg, &s.count) || s.count == 0 || s.count > 100000000) bad = "--count"; break;
		case 'd': if (tb_cli_u64_c(optarg, &duration)) bad = "--duration"; break;
		case 'r': if (tb_cli_u64_c(optarg, &s.rate)) bad = "--rate"; break;
		case 'E': if (tb_cli_u64_c(optarg, &s.burst_every)) bad = "--burst-every"; break;
		case 'L': if (tb_cli_u64_c(optarg, &s.burst_len)) bad = "--burst-len"; break;
		case 'k': if (tb_cli_u64_c(optarg, &v) || v == 0 || v > 1000) bad = "--max-per-pkt"; else s.max_per_pkt = (uint32_t)v; break;
		case 'O': if (tb_cli_u64_c(optarg, &v) || v < 16 || v > 10000000) bad = "--max-orders"; else s.max_orders = (uint32_t)v; break;
		case 's': if (tb_cli_u64_c(optarg, &seed)) bad = "--seed"; break;
		case 'X': if (tb_cli_u64_c(optarg, &drop_seed)) bad = "--drop-seed"; else have_drop_seed = 1; break;
		case 'x':
		case 0x102: {
			double *d = &s.line[c == 'x' ? 0 : 1].drop;
			char *end;

			*d = strtod(optarg, &end);
			if (*end || !(*d >= 0 && *d <= 1))
				bad = c == 'x' ? "--drop" : "--drop-b";
			break;
		}
		case 0x100: if (!tb_cli_is_ipv4(optarg)) bad = "--group-b"; else group_b = optarg; break;
		case 0x101: if (tb_cli_u64_c(optarg, &port_b) || port_b == 0 || port_b > 65535) bad = "--port-b"; break;
		case 0x103: if (tb_cli_u64_c(optarg, &drop_seed_b)) bad = "--drop-seed-b"; else have_drop_seed_b = 1; break;
		case 0x104: if (tb_cli_u64_c(optarg, &jit[0]) || jit[0] > 1000000) bad = "--jitter-us"; break;
		case 0x105: if (tb_cli_u64_c(optarg, &jit[1]) || jit[1] > 1000000) bad = "--jitter-b-us"; break;
		case 0x106: if (tb_cli_u64_c(optarg, &jitter_seed)) bad = "--jitter-seed"; else have_jitter_seed = 1; break;
		case 0x107: if (tb_cli_u64_c(optarg, &s.silent_from) || s.silent_from == 0) bad = "--b-silent-from"; break;
		case 0x108: if (tb_cli_u64_c(optarg, &s.silent_to) || s.silent_to == 0) bad = "--b-silent-to"; break;
		case 'S':
			if (!*optarg || strlen(optarg) > TB_MOLD_SESSION_LEN)
				bad = "--session";
			else {
				memset(s.session, ' ', TB_MOLD_SESSION_LEN);
				memcpy(s.session, optarg, strlen(optarg));
			}
			break;
		case 'H': if (tb_cli_u64_c(optarg, &hb_ms) || hb_ms == 0) bad = "--heartbeat-ms"; break;
		case 'D': if (tb_cli_u64_c(optarg, &start_ms)) bad = "--start-delay-ms"; break;
		case 'Z': if (tb_cli_u64_c(optarg, &end_ms)) bad = "--end-ms"; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (bad)
			return tb_cli_bad_value(prog, NULL, bad, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);

	s.rng_msg = seed_state(seed);
	s.rng_pkt = seed_state(seed ^ 0x5555555555555555ull);
	s.line[0].rng_drop = seed_state(have_drop_seed ? drop_seed : seed + 1);
	s.line[1].rng_drop = seed_state(have_drop_seed_b ? drop_seed_b : seed + 2);
	s.rng_jitter = seed_state(have_jitter_seed ? jitter_seed : seed + 3);
	if (s.silent_to && !s.silent_from)
		s.silent_from = 1;
	for (i = 0; i < 2; i++) {
		s.line[i].jitter_ns = jit[i] * 1000;
		if (jit[i] && !(s.line[i].q = calloc(HELD_MAX, sizeof(held_t)))) {
			fprintf(stderr, "tb-feedsim: out of memory\n");
			sim_free(&s);
			return 1;
		}
	}
	s.next_ref = 1;
	s.arena_cap = 1 << 20;
	s.off_cap = 1 << 16;
	s.off = calloc(s.off_cap, sizeof(*s.off));
	s.arena = malloc(s.arena_cap);
	s.mid = calloc(s.instruments + 1, sizeof(*s.mid));
	s.orders = calloc(s.max_orders, sizeof(*s.orders));
	if (!s.off || !s.arena || !s.mid || !s.orders) {
		fprintf(stderr, "tb-feedsim: out of memory\n");
		sim_free(&s);
		return 1;
	}
	for (i = 1; i <= s.instruments; i++)
		s.mid[i] = (int64_t)(50 + (xorshift(&s.rng_msg) % 200)) * 100 * TICK;
	if (open_sockets(&s, group, (uint16_t)port, group_b,
			 (uint16_t)(port_b ? port_b : port), iface, (int)ttl, rbind,
			 (uint16_t)rport) < 0) {
		sim_free(&s);
		return 1;
	}
	tb_cli_on_stop_signals(&stop);

	gen_system(&s, TB_ITCH_EV_START_MESSAGES);
	for (i = 1; i <= s.instruments; i++)
		gen_directory(&s, i);
	gen_system(&s, TB_ITCH_EV_START_MARKET);

	s.bytes_crc = TB_HASH_FNV1A_INIT;
	t0 = tb_clock_mono_ns();
	last_send = 0;
	while (!stop && tb_clock_mono_ns() - t0 < start_ms * 1000000ull) {
		if (tb_clock_mono_ns() - last_send >= hb_ms * 1000000ull) {
			send_ctl(&s, TB_MOLD_COUNT_HEARTBEAT);
			last_send = tb_clock_mono_ns();
		}
		serve_requests(&s);
		nap(&s, 1000000);
	}
	t0 = next_due = last_send = tb_clock_mono_ns();
	for (;;) {
		uint64_t now = tb_clock_mono_ns(), want, seq;
		uint16_t n;
		size_t len;

		flush_lines(&s, now);
		serve_requests(&s);
		/* Closing (signal or --duration): send what is generated, no
		 * more, so that the final books are those of the sent feed. */
		if (!closing && (stop || (duration &&
				now - t0 >= duration * 1000000000ull)))
			closing = 1;
		if ((closing || trailer) && s.sent >= s.have)
			break;
		if (!closing && burst_left == 0 && s.rate && now < next_due) {
			if (now - last_send >= hb_ms * 1000000ull) {
				send_ctl(&s, TB_MOLD_COUNT_HEARTBEAT);
				last_send = now;
			}
			/* Sleep when well ahead; never spin on a shared core. */
			if (next_due - now > 60000)
				nap(&s, next_due - now > 1000000 ? 1000000 :
				    next_due - now - 50000);
			else
				sched_yield();
			continue;
		}
		/* The next packet: 1..max_per_pkt messages, fewer if they do
		 * not fit; generate what is not generated yet. */
		want = 1 + xorshift(&s.rng_pkt) % s.max_per_pkt;
		while (!closing && !trailer && s.have - s.sent < want &&
		       s.order_msgs < s.count) {
			gen_order_msg(&s);
			s.order_msgs++;
		}
		if (!closing && !trailer && s.order_msgs >= s.count) {
			gen_system(&s, TB_ITCH_EV_END_MARKET);
			gen_system(&s, TB_ITCH_EV_END_MESSAGES);
			trailer = 1;
		}
		seq = s.sent + 1;
		len = pack(&s, pkt, seq, want, s.have, &n);
		s.bytes_crc = tb_hash_fnv1a64(s.bytes_crc, pkt, len);
		send_live(&s, pkt, len, 1, n);
		s.sent += n;
		last_send = now;
		if (s.burst_every && (since_burst += n) >= s.burst_every) {
			since_burst = 0;
			burst_left = s.burst_len;
		}
		if (burst_left) {
			burst_left = burst_left > n ? burst_left - n : 0;
			next_due = now; /* pacing restarts after the burst */
		} else if (s.rate) {
			next_due += (uint64_t)n * 1000000000ull / s.rate;
		}
	}
	/* A stopped feed still ends its session at what was sent. */
	s.have = s.sent;
	t0 = tb_clock_mono_ns();
	last_send = 0;
	stop = 0; /* a signal now ends the end-of-session phase early */
	while (s.line[0].n || s.line[1].n) { /* what the jitter holds first */
		flush_lines(&s, tb_clock_mono_ns());
		nap(&s, 50000);
	}
	while (!stop && tb_clock_mono_ns() - t0 < end_ms * 1000000ull) {
		if (tb_clock_mono_ns() - last_send >= 20000000ull) {
			send_ctl(&s, TB_MOLD_COUNT_END);
			last_send = tb_clock_mono_ns();
		}
		serve_requests(&s);
		nap(&s, 500000);
	}
	{
		uint64_t sum = 0;

		for (i = 0; i < s.norders; i++)
			sum += tb_book_order_hash(s.orders[i].instr, s.orders[i].ref,
						  s.orders[i].side, s.orders[i].price,
						  s.orders[i].qty);
		printf("feedsim: messages=%" PRIu64 " packets=%" PRIu64
		       " dropped=%" PRIu64 " heartbeats=%" PRIu64
		       " requests=%" PRIu64 " bad_requests=%" PRIu64
		       " unknown_requests=%" PRIu64 " retrans_msgs=%" PRIu64
		       " retrans_pkts=%" PRIu64 " last_seq=%" PRIu64
		       " orders=%u checksum=0x%016" PRIx64
		       " bytes_crc=0x%016" PRIx64 " data_packets=%" PRIu64
		       " packets_b=%" PRIu64 " dropped_b=%" PRIu64
		       " dropped_both=%" PRIu64 " dropped_both_msgs=%" PRIu64
		       " silent_b=%" PRIu64 "\n",
		       s.sent, s.line[0].packets, s.line[0].dropped, s.heartbeats,
		       s.requests, s.bad_requests, s.unknown_requests,
		       s.retrans_msgs, s.retrans_pkts, s.sent, s.norders, sum,
		       s.bytes_crc, s.data_packets, s.line[1].packets,
		       s.line[1].dropped, s.dropped_both, s.dropped_both_msgs,
		       s.silent_b);
	}
	sim_free(&s);
	return 0;
}
