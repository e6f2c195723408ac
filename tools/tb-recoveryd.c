/*
 * tb-recoveryd - the gap-recovery service.  For each stream named on the
 * command line it subscribes through the public API, writes every message
 * to the retransmit store (store.h), and answers recovery-protocol
 * requests for them (recovery/server.h) on one TCP endpoint.
 *
 * Restart: the store of the stream's current epoch is opened again and the
 * subscription starts at its last sequence + 1 (tb_sub_start_at), so what
 * was published while the service was down is recovered from the
 * publisher's retention buffer (the stream's retention_endpoint) before
 * live frames are stored.  What cannot be had is a hole: logged, counted
 * (holes=, and the data_loss counter), and, because the store holds
 * contiguous sequences only, the old store is moved aside to
 * <dir>/hole-<stream>-<epoch>-<first missing> and a new one begins after
 * the hole; requests for older sequences then get "too old".
 *
 * Serving: the recent frames of each stream are also kept in memory (a
 * retention window, publisher/retention.h, of --window-bytes), and a
 * request in that window is answered from it, without the store's lock or
 * a read of the disk.  Older frames of the current epoch come from the
 * store; frames of an earlier epoch (a subscriber still recovering what it
 * lost before the publisher restarted) from that epoch's store on disk,
 * opened read-only.  A record the store finds damaged is a hole with an
 * exact range (tb_store_lost), which the server tells the subscriber
 * (the LOST reject), so that it gets that range from another service or
 * reports exactly it lost, and is served on after it.  When the publisher is gone, the stream stays served:
 * a restarted service opens the newest epoch on disk, and the WELCOME of
 * the recovery protocol names it, so a subscriber that joins late, after
 * the publisher exited, is served all the same.
 *
 * Two instances may serve one stream (each with its own --dir and
 * --listen); subscribers list both in `recovery` and fail over.
 *
 * A stream taken from several sources (hot failover: `sources` in its
 * section) is subscribed to through all of them, so the store takes every
 * message from whichever copy brings it first and goes on while one
 * publisher is down; its own gaps are filled from the retention buffer of
 * any copy that has one.
 *
 * Failure: an error of a store (a full disk, an I/O error) ends the
 * service with exit status 1, so that a supervisor restarts it: a service
 * that goes on without storing would answer "too old" for what it failed
 * to keep.
 *
 * Logging: every log line (its own and the library's warnings) goes to
 * stderr; with --log FILE, stderr is FILE, opened for appending, and
 * SIGHUP opens FILE again (logrotate's rename-then-HUP): the descriptor
 * is swapped with dup2, so a line being written by another thread goes
 * whole to one file or the other.  SIGHUP is taken by the main thread
 * only (the others start with it blocked) and is harmless without --log.
 * The summary lines at the end go to stdout.
 *
 * Threads: the main thread polls every subscription and appends to the
 * stores and windows; the server's threads read them.  One mutex per
 * stream orders the store; the window has its own (publisher/retention.h);
 * the earlier epochs' stores have one of their own.
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"

#include "bus/config.h"
#include "bus/counters.h"
#include "bus/error.h"
#include "bus/frame.h"
#include "bus/recovery/client.h"
#include "bus/recovery/server.h"
#include "bus/recovery/store.h"
#include "publisher/retention.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 16
/* Earlier epochs' stores kept open at once, per stream. */
#define OLD_EPOCHS 4
#define WINDOW_DEFAULT (64ull << 20)

/* A store of an earlier epoch, open read-only. */
struct old_epoch {
	uint64_t epoch;          /* 0: free */
	tb_store_t *store;
	uint64_t used;           /* for choosing which to close */
};

struct stream {
	tb_stream_cfg_t cfg;      /* as subscribed: recovery = retention */
	tb_subscriber_t *sub;
	tb_store_t *store;
	uint64_t epoch;           /* of the open store */
	pthread_mutex_t lock;     /* store, epoch */
	uint64_t stored, holes, lost;
	/* Where the store must go on from at the first frame: set when the
	 * epoch was not known at open (datagram transports learn it from the
	 * first frame), so tb_sub_start_at could not ask for it; 0 once
	 * the subscription's own recovery is in charge. */
	int check_first;
	int ended;
	tb_counter_slot_t *ctr;
	uint8_t *frame;           /* scratch for one frame */
	uint32_t frame_cap;
	tb_retention_window_t window; /* the recent frames (mem NULL: none) */
	pthread_mutex_t old_lock; /* old[], and reads of their stores */
	struct old_epoch old[OLD_EPOCHS];
	uint64_t old_used;
};

static volatile sig_atomic_t stop;
/* A store failed: the service stops and exits non-zero. */
static volatile sig_atomic_t fatal;
static const char prog[] = "tb-recoveryd";
static char store_dir[TB_PATH_MAX];
static tb_store_sync_t sync_mode = TB_STORE_SYNC_NONE;
static uint64_t segment_bytes;
static uint64_t window_bytes = WINDOW_DEFAULT;
static const char *log_path;
static volatile sig_atomic_t reopen_log;

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-recoveryd -c FILE -s STREAM [-s STREAM]... --dir DIR --listen HOST:PORT\n"
"                    [options]\n"
"Subscribes to the streams, stores every message, and replays ranges to\n"
"subscribers over the recovery protocol.  SIGTERM or SIGINT stop it\n"
"cleanly; it then prints one line per stream:\n"
"  tb-recoveryd: stream NAME: stored=N first=F last=L holes=H lost=M\n"
"    requests=R served=S rejects=J damaged=D ...\n"
"(damaged: requests refused because their range was lost to damage in the\n"
"store - a corrupt record - so that the subscriber got it elsewhere or was\n"
"told exactly that range was lost)\n"
"options:\n"
"  -c, --config FILE      stream configuration file (INI)\n"
"  -s, --stream NAME      a stream of that file (repeat for more, up to 16)\n"
"  -d, --dir DIR          store directory (created if missing)\n"
"  -l, --listen HOST:PORT where to answer requests\n"
"      --max-count N      frames per request, 1..65536 (default 65536)\n"
"      --rate R           requests per second per client address (default 0:\n"
"                         unlimited); --burst B of them at once (default 2R)\n"
"      --sync MODE        none | interval | batch (default none)\n"
"      --segment-bytes N  store segment size (default 64 MiB)\n"
"      --window-bytes N   recent frames kept in memory per stream and served\n"
"                         from there: a power of two, 64K..1G, or 0 for none\n"
"                         (default 64 MiB)\n"
"      --max-clients N    authenticated connections at once (default 64)\n"
"      --hello-timeout-ms N  a new connection's time to authenticate, not\n"
"                         extended by its bytes (default 1000)\n"
"      --max-pending N    connections not yet authenticated, in all (default\n"
"                         256); --max-pending-per-addr N from one address\n"
"                         (default 16): over either, the oldest is closed\n"
"      --conn-rate R      new connections per second per address (default\n"
"                         100; 0: unlimited)\n"
"      --auth-delay-ms N  a wrong token is answered after N ms, twice as long\n"
"                         for each further one from its address (default 200,\n"
"                         up to 5000)\n"
"      --spin-us N        a connection's thread busy-polls for its next\n"
"                         request for N microseconds before it sleeps (0..\n"
"                         1000000, or 'always'; default 0): a request is\n"
"                         taken without a wake-up (tens of us), at the cost\n"
"                         of a core per spinning connection; for a service\n"
"                         on cores of its own\n"
"      --log FILE         append log lines to FILE (created 0640) instead of\n"
"                         stderr; SIGHUP opens FILE again, so logrotate can\n"
"                         rename it and send SIGHUP (postrotate), or use\n"
"                         copytruncate\n"
"  -h, --help             this text\n"
"Refused connections and wrong tokens are counted, and logged at most once a\n"
"second per kind with the number of the others.  SIGHUP reopens the --log\n"
"file (and does nothing else).\n"
"exit status: 0 stopped by a signal, 1 error (a store that failed: disk full,\n"
"I/O error), 2 usage\n");
}

/* ------------------------------------------------------------------ log */

static void on_hup(int sig)
{
	(void)sig;
	reopen_log = 1;
}

/* Makes stderr the end of log_path (created 0640 if missing).  0, or -1
 * with a message on the stderr of before, which is kept. */
static int log_open(void)
{
	int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
		      O_NOCTTY, 0640);

	if (fd < 0) {
		fprintf(stderr, "%s: --log %s: %s\n", prog, log_path,
			strerror(errno));
		return -1;
	}
	fflush(stderr);
	if (dup2(fd, STDERR_FILENO) < 0) {
		fprintf(stderr, "%s: --log %s: dup2: %s\n", prog, log_path,
			strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* SIGHUP: the log again at its path (logrotate moved the old one). */
static void log_reopen(void)
{
	reopen_log = 0;
	if (!log_path)
		return;
	if (log_open() == 0)
		fprintf(stderr, "%s: log reopened (SIGHUP), pid %d\n", prog,
			(int)getpid());
}

/* SIGHUP to the main thread only: blocked before any thread starts (they
 * inherit the mask), taken once they all have (log_hup_take). */
static void log_hup_block(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void log_hup_take(void)
{
	struct sigaction sa;
	sigset_t set;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_hup;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* ---------------------------------------------------------------- store */

/* A store failed: stop, and exit non-zero (see the top). */
static void die_of_store(void)
{
	fatal = 1;
	stop = 1;
}

static int open_store(struct stream *st, uint64_t epoch)
{
	tb_store_cfg_t sc;
	int rc;

	tb_store_cfg_init(&sc);
	snprintf(sc.dir, sizeof(sc.dir), "%s", store_dir);
	sc.stream_id = st->cfg.id;
	sc.epoch = epoch;
	sc.sync = sync_mode;
	if (segment_bytes)
		sc.segment_bytes = segment_bytes;
	rc = tb_store_open(&st->store, &sc);
	if (rc < 0) {
		fprintf(stderr, "%s: stream %s: store: %s\n", prog, st->cfg.name,
			tb_errmsg());
		return rc;
	}
	st->epoch = epoch;
	return 0;
}

/* Moves the current store aside and starts an empty one (after a hole). */
static int restart_store(struct stream *st, uint64_t first_missing)
{
	char from[TB_PATH_MAX + 64], to[TB_PATH_MAX + 96];

	tb_store_close(st->store);
	st->store = NULL;
	snprintf(from, sizeof(from), "%s/%" PRIu32 "-%016" PRIx64, store_dir,
		 st->cfg.id, st->epoch);
	snprintf(to, sizeof(to), "%s/hole-%" PRIu32 "-%016" PRIx64 "-%" PRIu64,
		 store_dir, st->cfg.id, st->epoch, first_missing);
	if (rename(from, to) < 0 && errno != ENOENT)
		fprintf(stderr, "%s: stream %s: move %s aside: %s\n", prog,
			st->cfg.name, from, strerror(errno));
	if (open_store(st, st->epoch) < 0) {
		die_of_store();
		return -1;
	}
	return 0;
}

static void log_hole(struct stream *st, uint64_t first, uint64_t last)
{
	st->holes++;
	st->lost += last - first + 1;
	tb_counter_inc(st->ctr, TB_CTR_DATA_LOSS);
	fprintf(stderr, "%s: stream %s: hole %" PRIu64 "..%" PRIu64
		" (%" PRIu64 " messages) could not be recovered; requests "
		"before %" PRIu64 " will be refused as too old\n", prog,
		st->cfg.name, first, last, last - first + 1, last + 1);
}

static void record_hole(struct stream *st, uint64_t first, uint64_t last)
{
	log_hole(st, first, last);
	pthread_mutex_lock(&st->lock);
	if (st->store && tb_store_last_seq(st->store) != 0 &&
	    tb_store_last_seq(st->store) < last)
		restart_store(st, first);
	pthread_mutex_unlock(&st->lock);
}

/* Stores `f`, a frame of the open store's epoch that follows its last,
 * and keeps it in the window.  Under the stream's lock.  0, or -1 when
 * the store failed (the service then stops: die_of_store). */
static int keep(struct stream *st, const tb_frame_hdr_t *f)
{
	int rc = tb_store_append(st->store, f);

	if (rc < 0) {
		fprintf(stderr, "%s: stream %s: append %" PRIu64 ": %s\n", prog,
			st->cfg.name, f->seq, tb_errmsg());
		die_of_store();
		return -1;
	}
	if (st->window.mem)
		tb_retention_window_append(&st->window, st->epoch, f);
	st->stored++;
	tb_counter_inc(st->ctr, TB_CTR_DELIVERED);
	return 0;
}

static int append_locked(void *clientd, const tb_frame_hdr_t *f)
{
	struct stream *st = clientd;
	int rc;

	pthread_mutex_lock(&st->lock);
	rc = keep(st, f);
	pthread_mutex_unlock(&st->lock);
	return rc < 0;
}

/* Fills [first, last] of `epoch` from the publisher's retention (the
 * stream's retention_endpoint) straight into the store.  Returns the first
 * sequence not filled. */
static uint64_t fill_from_retention(struct stream *st, uint64_t epoch,
				    uint64_t first, uint64_t last)
{
	tb_recovery_client_cfg_t c;
	uint64_t next = first;

	if (!st->cfg.n_recovery)
		return first;
	tb_recovery_client_cfg_init(&c);
	c.endpoints = st->cfg.recovery; /* the retention endpoint */
	c.n_endpoints = st->cfg.n_recovery;
	c.stream_id = st->cfg.id;
	c.token = st->cfg.token;
	c.deadline_ms = st->cfg.recovery_timeout_ms;
	if (tb_recovery_client_fetch(&c, epoch, first, last, append_locked, NULL, st,
			     NULL, &next) < 0)
		fprintf(stderr, "%s: stream %s: filling %" PRIu64 "..%" PRIu64
			" from retention: %s\n", prog, st->cfg.name, first, last,
			tb_errmsg());
	return next;
}

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct stream *st = clientd;
	uint64_t epoch = tb_sub_epoch(st->sub);
	tb_frame_hdr_t *f;

	if (m->len + TB_FRAME_HDR_LEN > st->frame_cap) {
		uint8_t *p = realloc(st->frame, m->len + TB_FRAME_HDR_LEN);

		if (!p) {
			fprintf(stderr, "%s: out of memory\n", prog);
			die_of_store();
			return;
		}
		st->frame = p;
		st->frame_cap = m->len + TB_FRAME_HDR_LEN;
	}
	f = (tb_frame_hdr_t *)st->frame;
	tb_frame_init(f, m->len, m->template_id, m->stream_id, m->seq,
		      m->publish_ns);
	memcpy(tb_frame_payload(f), m->data, m->len);
	pthread_mutex_lock(&st->lock);
	if (!st->store || st->epoch != epoch) {
		tb_store_close(st->store);
		st->store = NULL;
		if (open_store(st, epoch) < 0) {
			pthread_mutex_unlock(&st->lock);
			die_of_store();
			return;
		}
	}
	if (st->check_first) {
		/* The epoch is known only now: what the store lacks before
		 * this frame comes from the publisher's retention, or is a
		 * hole. */
		uint64_t want = tb_store_last_seq(st->store) + 1, next;

		st->check_first = 0;
		fprintf(stderr, "%s: stream %s: epoch %" PRIu64 ", store holds "
			"%" PRIu64 "..%" PRIu64 "; resuming at %" PRIu64
			" (first frame %" PRIu64 ")\n", prog, st->cfg.name, epoch,
			tb_store_first_seq(st->store), want - 1, want, m->seq);
		if (m->seq > want) {
			pthread_mutex_unlock(&st->lock);
			next = fill_from_retention(st, epoch, want, m->seq - 1);
			if (next < m->seq)
				log_hole(st, next, m->seq - 1);
			pthread_mutex_lock(&st->lock);
		}
	}
	if (tb_store_last_seq(st->store) != 0 &&
	    m->seq != tb_store_last_seq(st->store) + 1) {
		if (m->seq <= tb_store_last_seq(st->store)) {
			pthread_mutex_unlock(&st->lock);
			return; /* already stored (a restart's overlap) */
		}
		/* Only after a hole already logged: a new store after it. */
		if (restart_store(st, tb_store_last_seq(st->store) + 1) < 0) {
			pthread_mutex_unlock(&st->lock);
			return;
		}
	}
	keep(st, f);
	pthread_mutex_unlock(&st->lock);
}

/* ------------------------------------------------------- serving sources */

static void src_bounds(void *sd, uint64_t *epoch, uint64_t *first,
		       uint64_t *last)
{
	struct stream *st = sd;

	pthread_mutex_lock(&st->lock);
	*epoch = st->store ? st->epoch : 0;
	*first = st->store ? tb_store_first_seq(st->store) : 0;
	*last = st->store ? tb_store_last_seq(st->store) : 0;
	pthread_mutex_unlock(&st->lock);
}

/* From the window when it holds `first`: no store lock, no disk. */
static int src_read(void *sd, uint64_t first, int max, tb_store_read_fn fn,
		    void *clientd)
{
	struct stream *st = sd;
	uint64_t epoch;
	int rc;

	pthread_mutex_lock(&st->lock);
	epoch = st->store ? st->epoch : 0;
	pthread_mutex_unlock(&st->lock);
	if (epoch && st->window.mem) {
		rc = tb_retention_window_read(&st->window, epoch, first, max, fn,
					      clientd);
		if (rc > 0)
			return rc;
	}
	pthread_mutex_lock(&st->lock);
	rc = st->store && st->epoch == epoch ?
	     tb_store_read(st->store, first, max, fn, clientd) : TB_STORE_NOT_YET;
	pthread_mutex_unlock(&st->lock);
	return rc;
}

/* The server's copy straight into an answer: from the window only (an
 * answer from the store goes through src_read). */
static int src_copy(void *sd, uint64_t first, int max, void *dst, size_t cap,
		    size_t *len)
{
	struct stream *st = sd;
	uint64_t epoch;

	*len = 0;
	pthread_mutex_lock(&st->lock);
	epoch = st->store ? st->epoch : 0;
	pthread_mutex_unlock(&st->lock);
	if (!epoch || !st->window.mem)
		return TB_STORE_TOO_OLD;
	return tb_retention_window_copy(&st->window, epoch, first, max, dst, cap,
					len);
}

/* The read-only store of earlier epoch `epoch`, opened if need be (closing
 * the one used longest ago); NULL when there is none.  Under old_lock. */
static tb_store_t *old_store(struct stream *st, uint64_t epoch)
{
	struct old_epoch *o = NULL, *lru = &st->old[0];
	tb_store_cfg_t sc;

	for (int i = 0; i < OLD_EPOCHS; i++) {
		if (st->old[i].epoch == epoch) {
			o = &st->old[i];
			break;
		}
		if (st->old[i].used < lru->used)
			lru = &st->old[i];
	}
	if (!o) {
		tb_store_cfg_init(&sc);
		snprintf(sc.dir, sizeof(sc.dir), "%s", store_dir);
		sc.stream_id = st->cfg.id;
		sc.epoch = epoch;
		sc.read_only = 1;
		o = lru;
		tb_store_close(o->store);
		o->store = NULL;
		o->epoch = 0;
		if (tb_store_open(&o->store, &sc) < 0)
			return NULL; /* not on disk (TB_ENOENT), or unreadable */
		o->epoch = epoch;
	}
	o->used = ++st->old_used;
	return o->store;
}

static int src_epoch_bounds(void *sd, uint64_t epoch, uint64_t *first,
			    uint64_t *last)
{
	struct stream *st = sd;
	tb_store_t *s;
	int rc = TB_ENOENT;

	pthread_mutex_lock(&st->old_lock);
	if ((s = old_store(st, epoch)) != NULL && tb_store_last_seq(s) != 0) {
		*first = tb_store_first_seq(s);
		*last = tb_store_last_seq(s);
		rc = 0;
	}
	pthread_mutex_unlock(&st->old_lock);
	return rc;
}

static int src_epoch_read(void *sd, uint64_t epoch, uint64_t first, int max,
			  tb_store_read_fn fn, void *clientd)
{
	struct stream *st = sd;
	tb_store_t *s;
	int rc = TB_STORE_TOO_OLD;

	pthread_mutex_lock(&st->old_lock);
	if ((s = old_store(st, epoch)) != NULL)
		rc = tb_store_read(s, first, max, fn, clientd);
	pthread_mutex_unlock(&st->old_lock);
	return rc;
}

/* The range around `seq` of `epoch` that the store lost to damage (a
 * read said TB_STORE_LOST): 1 with it, or 0.  The store of the current
 * epoch under the stream's lock, an earlier one's under old_lock. */
static int src_lost(void *sd, uint64_t epoch, uint64_t seq, uint64_t *first,
		    uint64_t *last)
{
	struct stream *st = sd;
	tb_store_t *s;
	int rc = 0, current;

	pthread_mutex_lock(&st->lock);
	current = st->store && st->epoch == epoch;
	if (current)
		rc = tb_store_lost(st->store, seq, first, last);
	pthread_mutex_unlock(&st->lock);
	if (current)
		return rc;
	pthread_mutex_lock(&st->old_lock);
	if ((s = old_store(st, epoch)) != NULL)
		rc = tb_store_lost(s, seq, first, last);
	pthread_mutex_unlock(&st->old_lock);
	return rc;
}

/* ------------------------------------------------------------------ main */

static int open_stream(struct stream *st, const tb_stream_cfg_t *cfg,
		       const tb_config_t *file)
{
	tb_stream_cfg_t srcs[TB_SOURCES_MAX];
	uint64_t epoch, last = 0;
	int rc;

	st->cfg = *cfg;
	/* The service's own gaps are filled from the publisher's retention,
	 * never from another recovery service (which may be this one); for
	 * a stream of sources, from any copy's. */
	memset(st->cfg.recovery, 0, sizeof(st->cfg.recovery));
	st->cfg.n_recovery = 0;
	if (cfg->retention_endpoint.host[0]) {
		st->cfg.recovery[0] = cfg->retention_endpoint;
		st->cfg.n_recovery = 1;
	}
	for (int i = 0; i < cfg->n_sources; i++) {
		srcs[i] = *tb_config_stream(file, cfg->sources[i]);
		if (srcs[i].retention_endpoint.host[0])
			st->cfg.recovery[st->cfg.n_recovery++] =
				srcs[i].retention_endpoint;
	}
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->old_lock, NULL);
	if (window_bytes &&
	    tb_retention_window_init(&st->window, window_bytes, cfg->id) < 0) {
		fprintf(stderr, "%s: stream %s: %s\n", prog, cfg->name, tb_errmsg());
		return -1;
	}
	st->ctr = tb_counters_add_stream(cfg->id, cfg->name, TB_ROLE_RECOVERY,
					 "store");
	if (!st->ctr) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return -1;
	}
	rc = cfg->n_sources ?
	     tb_subscriber_open_sources(&st->sub, &st->cfg, srcs, cfg->n_sources) :
	     tb_subscriber_open(&st->sub, &st->cfg);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return rc;
	}
	epoch = tb_sub_epoch(st->sub);
	if (epoch != 0) {
		/* Attached to a live epoch: resume its store, or take the
		 * epoch from its start. */
		if (open_store(st, epoch) < 0)
			return -1;
		last = tb_store_last_seq(st->store);
		rc = tb_sub_start_at(st->sub, last + 1);
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			return rc;
		}
		fprintf(stderr, "%s: stream %s: epoch %" PRIu64 ", store holds "
			"%" PRIu64 "..%" PRIu64 "; resuming at %" PRIu64 "\n",
			prog, cfg->name, epoch, tb_store_first_seq(st->store),
			last, last + 1);
	} else {
		uint64_t newest = 0;

		/* No publisher to attach to (yet, or any more): serve the
		 * newest epoch on disk meanwhile.  The first frame says
		 * whether it goes on, or a new epoch begins. */
		st->check_first = 1;
		rc = tb_store_epochs(store_dir, cfg->id, &newest, 1);
		if (rc > 1 && (rc = tb_store_epochs(store_dir, cfg->id, NULL, 0)) > 0) {
			uint64_t *all = calloc((size_t)rc, sizeof(*all));

			if (all && tb_store_epochs(store_dir, cfg->id, all,
						   (size_t)rc) == rc)
				newest = all[rc - 1];
			free(all);
		}
		if (rc > 0 && newest) {
			if (open_store(st, newest) < 0)
				return -1;
			fprintf(stderr, "%s: stream %s: no publisher yet; serving "
				"epoch %" PRIu64 " from the store: %" PRIu64
				"..%" PRIu64 "\n", prog, cfg->name, newest,
				tb_store_first_seq(st->store),
				tb_store_last_seq(st->store));
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		{"dir", required_argument, 0, 'd'},
		{"listen", required_argument, 0, 'l'},
		{"max-count", required_argument, 0, 'M'},
		{"rate", required_argument, 0, 'R'},
		{"burst", required_argument, 0, 'B'},
		{"sync", required_argument, 0, 'Y'},
		{"segment-bytes", required_argument, 0, 'G'},
		{"window-bytes", required_argument, 0, 'W'},
		{"max-clients", required_argument, 0, 'C'},
		{"hello-timeout-ms", required_argument, 0, 'H'},
		{"max-pending", required_argument, 0, 'P'},
		{"max-pending-per-addr", required_argument, 0, 'A'},
		{"conn-rate", required_argument, 0, 'N'},
		{"auth-delay-ms", required_argument, 0, 'D'},
		{"spin-us", required_argument, 0, 'S'},
		{"log", required_argument, 0, 'O'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *config = NULL, *names[MAX_STREAMS], *listen = NULL;
	static struct stream streams[MAX_STREAMS];
	tb_recovery_server_source_t src[MAX_STREAMS];
	tb_recovery_server_cfg_t rcfg;
	tb_recovery_server_t *srv = NULL;
	tb_config_t *file = NULL;
	uint64_t v, last_flush = 0;
	int n = 0, c, rc, status = 0;
	tb_idle_t idle;

	tb_recovery_server_cfg_init(&rcfg);
	while ((c = getopt_long(argc, argv, "c:s:d:l:h", opts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's':
			if (n == MAX_STREAMS)
				bad = "--stream (up to 16)";
			else
				names[n++] = optarg;
			break;
		case 'd':
			if (strlen(optarg) >= sizeof(store_dir) - 64)
				bad = "--dir (too long)";
			else
				snprintf(store_dir, sizeof(store_dir), "%s", optarg);
			break;
		case 'l': listen = optarg; break;
		case 'M':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > TB_RECOVERY_PROTO_COUNT_MAX)
				bad = "--max-count";
			else
				rcfg.max_count = (uint32_t)v;
			break;
		case 'R':
			if (tb_cli_u64(optarg, &v) || v > 1000000)
				bad = "--rate";
			else
				rcfg.rate = (uint32_t)v;
			break;
		case 'B':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > 1000000)
				bad = "--burst";
			else
				rcfg.burst = (uint32_t)v;
			break;
		case 'Y':
			if (!strcmp(optarg, "none"))
				sync_mode = TB_STORE_SYNC_NONE;
			else if (!strcmp(optarg, "interval"))
				sync_mode = TB_STORE_SYNC_INTERVAL;
			else if (!strcmp(optarg, "batch"))
				sync_mode = TB_STORE_SYNC_BATCH;
			else
				bad = "--sync";
			break;
		case 'G':
			if (tb_cli_u64(optarg, &segment_bytes) ||
			    segment_bytes < TB_STORE_SEGMENT_MIN ||
			    segment_bytes > TB_STORE_SEGMENT_MAX)
				bad = "--segment-bytes";
			break;
		case 'W':
			if (tb_cli_u64(optarg, &window_bytes) ||
			    (window_bytes && !tb_ring_size_ok(window_bytes)))
				bad = "--window-bytes";
			break;
		case 'C':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > 4096)
				bad = "--max-clients";
			else
				rcfg.max_clients = (int)v;
			break;
		case 'H':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > 600000)
				bad = "--hello-timeout-ms";
			else
				rcfg.hello_timeout_ms = (uint32_t)v;
			break;
		case 'P':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > 65536)
				bad = "--max-pending";
			else
				rcfg.max_pending = (int)v;
			break;
		case 'A':
			if (tb_cli_u64(optarg, &v) || v < 1 || v > 65536)
				bad = "--max-pending-per-addr";
			else
				rcfg.max_pending_per_addr = (int)v;
			break;
		case 'N':
			if (tb_cli_u64(optarg, &v) || v > 1000000)
				bad = "--conn-rate";
			else
				rcfg.conn_rate = (uint32_t)v;
			break;
		case 'D':
			if (tb_cli_u64(optarg, &v) || v > 60000)
				bad = "--auth-delay-ms";
			else
				rcfg.auth_delay_ms = (uint32_t)v;
			break;
		case 'S':
			if (!strcmp(optarg, "always"))
				rcfg.spin_us = TB_RECOVERY_SERVER_SPIN_ALWAYS;
			else if (tb_cli_u64(optarg, &v) ||
				 v > TB_RECOVERY_SERVER_SPIN_MAX)
				bad = "--spin-us (0..1000000 or 'always')";
			else
				rcfg.spin_us = (uint32_t)v;
			break;
		case 'O':
			if (!*optarg)
				bad = "--log";
			else
				log_path = optarg;
			break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (bad)
			return tb_cli_bad_value(prog, usage, bad, optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, usage, argv[optind]);
	if (!config || n == 0 || !store_dir[0] || !listen)
		return tb_cli_usage_error(prog, usage, "--config, --stream, --dir "
					  "and --listen are required");
	if (tb_config_endpoint_parse(&rcfg.listen, listen) < 0) {
		fprintf(stderr, "%s: --listen %s: %s\n", prog, listen, tb_errmsg());
		return 2;
	}
	if (log_path && log_open() < 0)
		return 1;
	log_hup_block();
	if (tb_config_load(&file, config) < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		return 1;
	}
	for (int i = 0; i < n; i++) {
		const tb_stream_cfg_t *cfg = tb_config_stream(file, names[i]);

		if (!cfg) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			status = 1;
			goto out;
		}
		if (!cfg->token[0]) {
			fprintf(stderr, "%s: stream %s has no token; requests are "
				"authenticated with it\n", prog, cfg->name);
			status = 1;
			goto out;
		}
		if (open_stream(&streams[i], cfg, file) < 0) {
			status = 1;
			goto out;
		}
		memset(&src[i], 0, sizeof(src[i]));
		src[i].stream_id = cfg->id;
		src[i].token = streams[i].cfg.token;
		src[i].bounds = src_bounds;
		src[i].read = src_read;
		src[i].epoch_bounds = src_epoch_bounds;
		src[i].epoch_read = src_epoch_read;
		src[i].copy = src_copy;
		src[i].lost = src_lost;
		src[i].sd = &streams[i];
	}
	if (tb_recovery_server_open(&srv, &rcfg, src, n) < 0) {
		fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
		status = 1;
		goto out;
	}
	fprintf(stderr, "%s: listening on %s:%u\n", prog, rcfg.listen.host,
		tb_recovery_server_port(srv));
	tb_cli_on_stop_signals(&stop);
	log_hup_take();

	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (!stop) {
		int work = 0;

		if (reopen_log)
			log_reopen();
		for (int i = 0; i < n && !stop; i++) {
			struct stream *st = &streams[i];
			uint64_t a, b;

			rc = tb_sub_poll(st->sub, on_msg, st, 1024);
			if (rc > 0) {
				work += rc;
			} else if ((rc == TB_DATA_LOSS || rc == TB_GAP ||
				    rc == TB_LAPPED) &&
				   tb_sub_loss(st->sub, &a, &b) == 0) {
				record_hole(st, a, b);
			} else if (rc == TB_NEW_EPOCH) {
				fprintf(stderr, "%s: stream %s: new epoch %" PRIu64
					"\n", prog, st->cfg.name,
					tb_sub_epoch(st->sub));
			}
		}
		if (work == 0) {
			uint64_t now = tb_clock_mono_ms();

			if (now - last_flush >= 10) {
				for (int i = 0; i < n; i++) {
					pthread_mutex_lock(&streams[i].lock);
					if (streams[i].store)
						tb_store_flush(streams[i].store);
					pthread_mutex_unlock(&streams[i].lock);
				}
				tb_counters_heartbeat();
				last_flush = now;
			}
		}
		tb_idle_step(&idle, work);
	}

out:
	if (srv) {
		tb_recovery_server_stats_t rs;
		uint64_t rejects = 0;

		tb_recovery_server_stats(srv, &rs);
		for (int r = 0; r <= TB_RECOVERY_PROTO_REJ_MAX; r++)
			rejects += rs.rejects[r];
		tb_recovery_server_close(srv);
		for (int i = 0; i < n; i++) {
			struct stream *st = &streams[i];

			printf("%s: stream %s: stored=%" PRIu64 " first=%" PRIu64
			       " last=%" PRIu64 " holes=%" PRIu64 " lost=%" PRIu64
			       " requests=%" PRIu64 " served=%" PRIu64
			       " rejects=%" PRIu64 " damaged=%" PRIu64
			       " malformed=%" PRIu64
			       " unauthorised=%" PRIu64 " connections=%" PRIu64
			       " authenticated=%" PRIu64 " auth_failures=%" PRIu64
			       " hello_timeouts=%" PRIu64 " evicted=%" PRIu64
			       " conn_limited=%" PRIu64 " busy=%" PRIu64
			       " logs_suppressed=%" PRIu64 "\n", prog, st->cfg.name,
			       st->stored,
			       st->store ? tb_store_first_seq(st->store) : 0,
			       st->store ? tb_store_last_seq(st->store) : 0,
			       st->holes, st->lost, rs.requests, rs.served,
			       rejects, rs.rejects[TB_RECOVERY_PROTO_REJ_LOST],
			       rs.rejects[TB_RECOVERY_PROTO_REJ_MALFORMED],
			       rs.rejects[TB_RECOVERY_PROTO_REJ_UNAUTHORISED],
			       rs.connections, rs.authenticated, rs.auth_failures,
			       rs.hello_timeouts, rs.evicted, rs.conn_limited,
			       rs.busy, rs.logs_suppressed);
		}
		fflush(stdout);
	}
	for (int i = 0; i < n; i++) {
		struct stream *st = &streams[i];

		tb_subscriber_close(st->sub);
		tb_store_close(st->store);
		if (st->ctr)
			tb_counters_remove_stream(st->ctr);
		free(st->frame);
		tb_retention_window_free(&st->window);
		for (int k = 0; k < OLD_EPOCHS; k++)
			tb_store_close(st->old[k].store);
		pthread_mutex_destroy(&st->lock);
		pthread_mutex_destroy(&st->old_lock);
	}
	tb_config_free(file);
	if (fatal) {
		fprintf(stderr, "%s: stopped: a store failed (see above)\n", prog);
		status = 1;
	}
	return status;
}
