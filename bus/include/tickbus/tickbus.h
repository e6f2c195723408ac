/*
 * tickbus.h - the public C API of tickbus, the one header a feed handler or a
 * strategy includes.
 *
 * A publisher writes sequenced messages to a stream; subscribers poll the
 * stream and get every message in order, or are told exactly which sequence
 * numbers they lost.  A stream is described by a tb_stream_cfg_t, filled by
 * hand or read from an INI file (tb_config_load).
 *
 * Threads: a tb_publisher_t is used by one thread at a time (the hot thread
 * that offers); a tb_subscriber_t likewise by the thread that polls.  Open and
 * close may run on any thread.  Different publishers and subscribers are
 * independent.
 *
 * Results: every function returns 0 or a count on success, a negative TB_*
 * code otherwise (tickbus_err.h).  Hot-path results (TB_BACK_PRESSURED,
 * TB_NOT_CONNECTED, TB_LAPPED, ...) are expected outcomes; set-up errors
 * leave a message in tb_errmsg().  Each set-up call's "Errors:" line lists
 * the codes it can return; "Errors: none" means it cannot fail.
 *
 * The header compiles as C11 and as C++.
 */
#ifndef TICKBUS_H
#define TICKBUS_H

#include "tickbus_err.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TB_NAME_MAX 64
#define TB_HOST_MAX 64
#define TB_PATH_MAX 256
#define TB_TOKEN_MAX 128
#define TB_RECOVERY_MAX 4
#define TB_SOURCES_MAX 4

/* ---------------------------------------------------------------- streams */

typedef enum tb_transport {
	TB_TRANSPORT_SHM = 0, /* shared-memory ring, same host */
	TB_TRANSPORT_RC = 1,  /* RDMA RC WRITE-with-immediate into each ring */
	TB_TRANSPORT_UD = 2,  /* RDMA UD multicast */
	TB_TRANSPORT_UDP = 3, /* UDP multicast, hosts without RDMA */
} tb_transport_t;

typedef enum tb_idle_kind {
	TB_IDLE_BUSY_SPIN = 0,  /* never gives up the core: lowest latency */
	TB_IDLE_SPIN_YIELD = 1, /* spins, then sched_yield()s */
	TB_IDLE_BACKOFF = 2,    /* spins, yields, then sleeps up to a bound */
} tb_idle_kind_t;

typedef enum tb_slow_policy {
	TB_SLOW_LAP = 0,          /* a slow subscriber is overrun and recovers */
	TB_SLOW_BACKPRESSURE = 1, /* the publisher gets TB_BACK_PRESSURED */
} tb_slow_policy_t;

typedef struct tb_endpoint {
	char host[TB_HOST_MAX]; /* numeric address or name */
	uint16_t port;
} tb_endpoint_t;

/* Everything that describes one stream.  tb_stream_cfg_init() fills the
 * defaults; a config file section overrides them key by key. */
typedef struct tb_stream_cfg {
	char name[TB_NAME_MAX];        /* required */
	uint32_t id;                   /* required, > 0 */
	tb_transport_t transport;      /* required */
	uint64_t ring_size;            /* bytes, power of two; default 4 MiB */
	int publisher_core;            /* -1: not pinned */
	int subscriber_core;           /* -1: not pinned */
	tb_idle_kind_t idle;           /* default spin-then-yield */
	tb_slow_policy_t slow_consumer;/* default lap */
	char token[TB_TOKEN_MAX];      /* auth token for control and recovery */
	tb_endpoint_t recovery[TB_RECOVERY_MAX]; /* tried in order */
	int n_recovery;
	uint32_t heartbeat_ms;         /* publisher liveness beat; default 100 */
	uint32_t liveness_timeout_ms;  /* beat older than this = dead; 1000 */
	uint32_t retention;            /* messages the publisher keeps; 0 = off */
	tb_endpoint_t retention_endpoint; /* where the publisher serves them
					     (recovery protocol); "" = not */
	uint64_t recovery_buffer;      /* live bytes a recovering subscriber
					  holds; default 4 MiB */
	uint32_t recovery_timeout_ms;  /* a gap not recovered by then is
					  TB_DATA_LOSS; default 5000 */

	/* shm */
	char shm_path[TB_PATH_MAX];    /* default /dev/shm/tickbus.<name> */
	uint32_t shm_mode;             /* ring file mode; 0 = 0600, or 0640
					  with shm_group */
	char shm_group[TB_NAME_MAX];   /* group name or gid whose members'
					  rings readers trust; "" = none */

	/* rc: the publisher's control endpoint, and the RDMA device */
	tb_endpoint_t control;
	char rdma_device[TB_NAME_MAX]; /* "" = first device with an active port */
	int rdma_port;                 /* 0 = first active port */
	int gid_index;                 /* -1 = first RoCEv2 IPv4 GID */
	int rdma_traffic_class;        /* GRH traffic class, 0..255; default
					  106 (DSCP 26, ECN capable) */
	int rdma_timeout;              /* ACK timeout 4.096 us * 2^n, 1..31;
					  default 12 (16.8 ms) */
	int rdma_retry;                /* retries before a QP fails, 0..7;
					  default 7 */
	int rdma_sl;                   /* InfiniBand service level, 0..15;
					  default 0 */

	/* ud and udp: the multicast group */
	tb_endpoint_t group;
	char interface[TB_HOST_MAX];   /* local address or netdev; "" = default */
	int ttl;                       /* default 1 */
	int loopback;                  /* deliver to this host too; default 1 */
	uint32_t mtu;                  /* datagram payload bound; 0 = path MTU */
	uint32_t batch_us;             /* max time a message is held; 0 = none */
	uint32_t rcvbuf;               /* SO_RCVBUF bytes; 0 = system default */
	uint32_t recv_depth;           /* ud: receive buffers of the group's
					  mtu; 0 = 4096 (at most the device's
					  queue depth) */

	/* A stream taken from several sources: identical copies of it,
	 * published side by side under one epoch (hot failover), each a
	 * stream of its own in the config file with this stream's id.  Such
	 * a stream has no transport of its own; see
	 * tb_subscriber_open_sources. */
	char sources[TB_SOURCES_MAX][TB_NAME_MAX]; /* names; n_sources used */
	int n_sources;                 /* 0: an ordinary stream */
	uint32_t sources_wait_us;      /* how long a gap on one copy waits for
					  another to fill it; default 1000 */
} tb_stream_cfg_t;

/* Fills `cfg` with the defaults above; name, id and transport stay unset.
 * Errors: none. */
void tb_stream_cfg_init(tb_stream_cfg_t *cfg);

/* Checks a filled struct: every value in range, every required field set.
 * Returns 0 or an error with a message naming the field.
 * Errors: TB_EINVAL (cfg is NULL), TB_ECONFIG (a field missing or out of
 * range, or the shm path too long). */
int tb_stream_cfg_validate(const tb_stream_cfg_t *cfg);

typedef struct tb_config tb_config_t;

/* Reads an INI file of [stream NAME] sections.  Unknown keys, bad values and
 * missing required keys fail with TB_ECONFIG and a message naming the file,
 * the line and the key.
 * Errors: TB_EINVAL (cfg or path NULL), TB_ECONFIG (the file's contents;
 * a file over 1 MiB; not a regular file: a directory, FIFO or device),
 * TB_ENOMEM, TB_EIO (inih failed), and for a file that cannot be opened or
 * read the code of its errno (tb_error_sys: TB_ENOENT, TB_EIO, or TB_ESYS
 * for e.g. permission denied). */
int tb_config_load(tb_config_t **cfg, const char *path);
/* Frees what tb_config_load made; NULL is a no-op.  Errors: none. */
void tb_config_free(tb_config_t *cfg);
/* Streams in the file; 0 for NULL.  Errors: none. */
int tb_config_stream_count(const tb_config_t *cfg);
/* The i-th stream, in file order, or NULL with a message.
 * Errors (message only): TB_EINVAL (i out of range, or cfg NULL). */
const tb_stream_cfg_t *tb_config_stream_at(const tb_config_t *cfg, int i);
/* The stream called `name`, or NULL (with a message) when there is none.
 * Errors (message only): TB_EINVAL (NULL argument), TB_ENOENT (no such
 * stream; the message lists those the file has). */
const tb_stream_cfg_t *tb_config_stream(const tb_config_t *cfg,
					const char *name);

/* -------------------------------------------------------------- publisher */

typedef struct tb_publisher tb_publisher_t;

/*
 * Opens the publishing end of a stream.  For shm it creates (or takes over)
 * the ring file and starts a new epoch.  Returns 0 or a TB_E* code.
 * Errors: tb_stream_cfg_validate's (TB_EINVAL, TB_ECONFIG); TB_ENOTSUP
 * (transport not in this build, no RDMA on this host, or shm with
 * slow_consumer = backpressure); TB_EINVAL (publisher_core does not exist
 * or is not allowed, a retention_endpoint host that does not resolve);
 * TB_ECONFIG (a group, interface, GID or control endpoint this host cannot
 * use); TB_ENOENT (no such RDMA device or active port); TB_EBUSY (the shm
 * ring is owned by a running publisher, or an endpoint's port is in use);
 * TB_ENOMEM; and, for a failed system or verbs call (named in the
 * message), the code of its errno (tb_error_sys: TB_ESYS, or e.g. TB_EIO,
 * TB_EBUSY).
 */
int tb_publisher_open(tb_publisher_t **pub, const tb_stream_cfg_t *cfg);
/*
 * As tb_publisher_open, in epoch `epoch` rather than a new one.  For two
 * or more publishers of identical copies of one stream (hot failover):
 * the same messages under the same sequence numbers, so that a subscriber
 * of the copies (tb_subscriber_open_sources) may take each message from
 * whichever copy brings it first, and one that restarts goes on in the
 * stream it left.  The epoch must be derived from what the copies agree
 * on (a feed's session and start point), never from a clock or a pid;
 * publishing different messages under one epoch corrupts subscribers.
 * Errors: TB_EINVAL (pub NULL, epoch 0), and tb_publisher_open's.
 */
int tb_publisher_open_epoch(tb_publisher_t **pub, const tb_stream_cfg_t *cfg,
			    uint64_t epoch);
/* As above, reading stream `stream` from config file `path`.
 * Errors: tb_config_load's, TB_ENOENT (no such stream in the file), and
 * tb_publisher_open's. */
int tb_publisher_open_file(tb_publisher_t **pub, const char *path,
			   const char *stream);
/* Marks the stream closed (subscribers see TB_CLOSED) and frees it; NULL is
 * a no-op.  Returns 0.  Errors: none. */
int tb_publisher_close(tb_publisher_t *pub);

/* Copies `len` bytes in as one message.  Returns its sequence number (> 0),
 * or TB_BACK_PRESSURED, TB_NOT_CONNECTED or TB_EMSGSIZE.  Hot path. */
int64_t tb_pub_offer(tb_publisher_t *pub, uint16_t template_id,
		     const void *buf, uint32_t len);

/* One message of a burst (tb_pub_offerv). */
typedef struct tb_pub_msg {
	const void *data;
	uint32_t len;
	uint16_t template_id;
} tb_pub_msg_t;

/* Copies msgs[0..n) in as n messages, in order, as tb_pub_offer would one
 * by one, but with one reading of the clock: every frame of the burst
 * (the messages of one packet, say) carries the time it began.  Reading
 * the clock is a good part of a small offer's cost (a TSC read is tens of
 * cycles), so a burst costs less a message.  Each message is sent as
 * tb_pub_offer sends it (a batching stream holds them for its flush, as
 * it would hold single offers).  Returns how many were published: n, or
 * fewer when msgs[count] could not be (offering it then returns why), or
 * a negative code when the first could not be: as tb_pub_offer's, and
 * TB_EINVAL (n negative, msgs NULL).  0 for n == 0.  Hot path. */
int tb_pub_offerv(tb_publisher_t *pub, const tb_pub_msg_t *msgs, int n);

/* A message being written in place (zero copy). */
typedef struct tb_claim {
	void *data;        /* write the payload here */
	uint32_t len;      /* as claimed */
	uint64_t seq;      /* the sequence it will carry */
	void *frame_;      /* private */
} tb_claim_t;

/* Reserves room for a `len`-byte message; fill claim->data, then commit or
 * abort.  One claim may be open at a time per publisher.  Hot path. */
int tb_pub_claim(tb_publisher_t *pub, uint16_t template_id, uint32_t len,
		 tb_claim_t *claim);
/* Publishes a claimed message; returns its sequence number.  Hot path. */
int64_t tb_pub_commit(tb_publisher_t *pub, tb_claim_t *claim);
/* Gives a claim back unpublished: the sequence number is not consumed.
 * Errors: TB_ESTATE (no claim open, or not this one). */
int tb_pub_abort(tb_publisher_t *pub, tb_claim_t *claim);

/* Sends whatever a batching transport holds (with batch_us > 0, ud and udp
 * keep a partly filled datagram, rc up to 16 messages per subscriber, for
 * up to batch_us, checked at each offer); call it when a burst ends.  Returns 0 or a negative code; a
 * no-op for shm.  Hot path. */
int tb_pub_flush(tb_publisher_t *pub);

/* Sequence number the next message will carry.  Errors: none. */
uint64_t tb_pub_next_seq(const tb_publisher_t *pub);
/* The epoch this publisher opened (a new one on every open, or the one
 * given to tb_publisher_open_epoch).  Errors: none. */
uint64_t tb_pub_epoch(const tb_publisher_t *pub);
/* The subscribers the stream sends to now: on rc, those connected (a
 * feed replayed for a test can wait for its readers before the first
 * message).  Call it from the publishing thread.  Errors: TB_ENOTSUP on
 * shm, udp and ud, whose publisher does not know who reads. */
int tb_pub_subscribers(tb_publisher_t *pub);

/* ------------------------------------------------------------- subscriber */

/* What a handler sees of one message.  `data` is valid only during the
 * call. */
typedef struct tb_msg {
	const void *data;
	uint32_t len;
	uint16_t template_id;
	uint16_t flags;        /* TB_MSG_F_* */
	uint32_t stream_id;
	uint64_t seq;
	uint64_t publish_ns;   /* publisher's clock at publish */
	uint64_t receive_ns;   /* subscriber's clock when polled */
} tb_msg_t;

#define TB_MSG_F_REPLAY 1u   /* delivered by recovery, not live */
#define TB_MSG_F_SNAPSHOT 2u /* part of a snapshot (tb_sub_start_at_snapshot) */

typedef void (*tb_handler_t)(void *clientd, const tb_msg_t *msg);

typedef struct tb_subscriber tb_subscriber_t;

/*
 * Opens the subscribing end.  A subscriber may open before its publisher:
 * polls return TB_NOT_CONNECTED until it appears.  A late joiner starts at
 * the live position.
 * Errors: tb_stream_cfg_validate's (TB_EINVAL, TB_ECONFIG); TB_ENOTSUP
 * (transport not in this build, no RDMA on this host); TB_EINVAL
 * (subscriber_core does not exist or is not allowed, a malformed
 * TICKBUS_UDP_DROP test hook); TB_ECONFIG (a group, interface, GID or
 * control endpoint this host cannot use); TB_ENOENT (no such RDMA device or
 * active port); TB_EFORMAT (the shm file is not a ring of this format);
 * TB_ENOMEM; and, for a failed system or verbs call (named in the
 * message; the recovery thread's eventfd and pthread_create among them),
 * the code of its errno (tb_error_sys: TB_ESYS, or e.g. TB_EIO, TB_EBUSY).
 */
int tb_subscriber_open(tb_subscriber_t **sub, const tb_stream_cfg_t *cfg);
/* As above, reading stream `stream` from config file `path`; a stream
 * with `sources` is opened with tb_subscriber_open_sources, its sources
 * read from the same file.
 * Errors: tb_config_load's, TB_ENOENT (no such stream in the file), and
 * tb_subscriber_open's or tb_subscriber_open_sources'. */
int tb_subscriber_open_file(tb_subscriber_t **sub, const char *path,
			    const char *stream);
/*
 * Opens a subscriber of one stream published as `n` identical copies
 * (hot failover: publishers opened with tb_publisher_open_epoch, on any
 * mix of transports).  `cfg` is the stream as a whole: its id, idle,
 * subscriber_core, recovery keys and sources_wait_us (its transport keys
 * are not used); sources[i] describes copy i, and must carry cfg's id.
 * Each sequence is delivered once, from whichever copy brings it first.
 * A gap on one copy is filled from another, waiting up to
 * cfg.sources_wait_us for it; what no copy holds is a gap as on one
 * stream (recovered with cfg.recovery, or TB_GAP).  A copy that dies,
 * closes or falls silent is not reported while another goes on, and is
 * followed again when it comes back in the same epoch; the poll reports
 * TB_PUBLISHER_DEAD or TB_CLOSED only when every copy has ended (the
 * last one's), TB_NOT_CONNECTED while none has appeared.  A copy that
 * comes back in another epoch is left alone until no copy of the
 * followed epoch is live; the subscriber then takes its epoch
 * (TB_NEW_EPOCH).
 * Errors: TB_EINVAL (NULL, n outside 1..TB_SOURCES_MAX, a source whose
 * id is not cfg's), tb_stream_cfg_validate's for cfg and each source,
 * and tb_subscriber_open's.
 */
int tb_subscriber_open_sources(tb_subscriber_t **sub, const tb_stream_cfg_t *cfg,
			       const tb_stream_cfg_t *sources, int n);
/* Stops recovery, closes the transport and frees; NULL is a no-op.
 * Returns 0.  Errors: none. */
int tb_subscriber_close(tb_subscriber_t *sub);

/*
 * Delivers up to `limit` messages in sequence order to `handler`.  Returns
 * how many it delivered (0 when there is nothing new), or, when it delivered
 * nothing, a condition: TB_NOT_CONNECTED, TB_LAPPED or TB_GAP (the missing
 * range is in tb_sub_loss), TB_NEW_EPOCH, TB_CLOSED, TB_PUBLISHER_DEAD,
 * TB_EVICTED (rc: the publisher, alive, dropped this subscriber; it
 * reconnects, and what it missed comes as TB_LAPPED; with recovery
 * endpoints it also asks them at once for everything after its last
 * message, so that it misses nothing even if the publisher finishes or
 * dies before it is back).  rc: a subscriber whose connection broke on
 * its own side (its address, device or completion queue) reconnects by
 * itself, polling TB_NOT_CONNECTED meanwhile; after that or an eviction,
 * a publisher it cannot reach again within liveness_timeout_ms of the
 * last word from it is dead: TB_LAPPED for what it said it had published
 * beyond ours, then TB_PUBLISHER_DEAD, as for one gone silent (and it
 * goes on looking for a restarted one).  A condition is
 * returned once, at its place in the stream; polling again goes on.  A
 * subscriber lapped while the stream then goes quiet is told within one
 * heartbeat.  Never blocks.  Hot path.
 *
 * With recovery endpoints (cfg.recovery), gaps and laps are not returned:
 * the missing messages are fetched in the background and delivered in
 * order (flag TB_MSG_F_REPLAY) before the later live ones; what cannot be
 * recovered within cfg.recovery_timeout_ms, or is no longer held, is
 * returned once as TB_DATA_LOSS with its exact range in tb_sub_loss, and
 * delivery goes on after it.
 */
int tb_sub_poll(tb_subscriber_t *sub, tb_handler_t handler, void *clientd,
		int limit);

/* The range of the last TB_LAPPED, TB_GAP or TB_DATA_LOSS; returns 0.
 * Errors: TB_ENOENT (there has been none), without a message. */
int tb_sub_loss(const tb_subscriber_t *sub, uint64_t *first, uint64_t *last);
/*
 * Late join: deliver from sequence `seq` of the epoch (1 = its start)
 * rather than from the live position.  Call after open, before the first
 * poll.  What lies between `seq` and the live position is a gap: recovered
 * from cfg.recovery when endpoints are configured (replayed messages carry
 * TB_MSG_F_REPLAY; on a quiet stream the first idle poll asks the services
 * up to the latest they hold), else reported as TB_GAP when the next
 * message arrives.  A subscriber that attaches to a ring before its first
 * message starts at 1 anyway.  Returns 0.
 * Errors: TB_EINVAL (seq 0), TB_ESTATE (messages already delivered, or a
 * recovery under way).
 */
int tb_sub_start_at(tb_subscriber_t *sub, uint64_t seq);
/* What a message of a snapshot stream is to a late joiner: the caller's
 * schema says, through a tb_snapshot_fn. */
typedef enum tb_snapshot_part {
	TB_SNAPSHOT_NONE = 0,  /* not part of a snapshot: skipped */
	TB_SNAPSHOT_BEGIN = 1, /* a snapshot starts; *seq = the sequence of
				  the incremental stream it is consistent
				  with (0: before its first message) */
	TB_SNAPSHOT_BODY = 2,  /* part of the snapshot */
	TB_SNAPSHOT_END = 3,   /* the snapshot is whole; *seq as at BEGIN */
} tb_snapshot_part_t;

typedef tb_snapshot_part_t (*tb_snapshot_fn)(void *clientd,
					     const tb_msg_t *msg,
					     uint64_t *seq);

/*
 * Late join from a snapshot.  Polls `snap`, a subscriber of the snapshot
 * stream that goes with `sub`'s stream (published in the same epoch),
 * until it has one whole snapshot: a BEGIN, its BODY, and an END of the
 * same sequence S, with no loss between them.  Hands that snapshot's
 * messages to `handler` (BEGIN and END included, each with
 * TB_MSG_F_SNAPSHOT), then makes `sub` start at S + 1 (tb_sub_start_at),
 * and returns S in *seq.  Polling `sub` then delivers S + 1 and on: from
 * its transport, which holds what was published since `sub` was opened
 * (so open `sub` before `snap`), and what it no longer holds recovered
 * from cfg.recovery, as for any late join.  A snapshot interrupted by a
 * loss, or of another epoch than `sub`'s, is dropped, and the next one
 * awaited.  A set-up call: it blocks, up to `timeout_ms`, and allocates
 * the snapshot's buffer.
 * Errors: TB_EINVAL (NULL argument, sub == snap), TB_ESTATE (sub has
 * delivered messages or is recovering), TB_ETIMEDOUT (no whole snapshot
 * in time; the message says what was seen), TB_ENOMEM, and a set-up
 * error that polling `snap` returned.
 */
int tb_sub_start_at_snapshot(tb_subscriber_t *sub, tb_subscriber_t *snap,
			     tb_snapshot_fn part, tb_handler_t handler,
			     void *clientd, uint32_t timeout_ms, uint64_t *seq);

/* 1 while a gap is being recovered (messages come from recovery and the
 * live buffer), 0 when live.  Errors: none. */
int tb_sub_recovering(const tb_subscriber_t *sub);

/* Epoch of the publisher this subscriber follows (0 before it connects).
 * Errors: none. */
uint64_t tb_sub_epoch(const tb_subscriber_t *sub);
/* Next sequence number this subscriber expects (0 before the first).
 * Errors: none. */
uint64_t tb_sub_next_seq(const tb_subscriber_t *sub);

/* ----------------------------------------------------------------- inputs */

/* An input of the application that is not a tickbus stream - a feed
 * handler's exchange lines A and B - counted in the process's counters
 * file beside its streams, so that tb-stat shows it as it shows a
 * subscriber: named `name`, its `kind` where a stream's transport goes. */
typedef struct tb_input tb_input_t;

typedef enum tb_input_counter {
	TB_INPUT_DELIVERED = 0,  /* messages taken from it (tb-stat: msgs/s) */
	TB_INPUT_DUPLICATES = 1, /* messages it brought that another input
				    had brought first */
	TB_INPUT_GAPS = 2,       /* losses it showed */
	TB_INPUT_ERRORS = 3,     /* failures, e.g. falling silent */
	TB_INPUT_MALFORMED = 4,  /* input refused as malformed */
	TB_INPUT_COUNTERS = 5
} tb_input_counter_t;

/* Opens the counters of input `name` (id: any number the application
 * gives it, shown as a stream id).  When the counters file cannot take it,
 * it is counted privately, after a warning: never fails for that.
 * Errors: TB_EINVAL (NULL argument, empty name), TB_ENOMEM. */
int tb_input_open(tb_input_t **in, uint32_t id, const char *name,
		  const char *kind);
/* Adds `n` to counter `c` (others ignored).  Hot path: no lock, no system
 * call; from the one thread that owns the input.  Errors: none. */
void tb_input_add(tb_input_t *in, tb_input_counter_t c, uint64_t n);
/* The value of counter `c` (0 for another).  Errors: none. */
uint64_t tb_input_get(const tb_input_t *in, tb_input_counter_t c);
/* Removes the input from the counters file and frees it; NULL is a no-op.
 * Errors: none. */
void tb_input_close(tb_input_t *in);

/* ------------------------------------------------------ latency exported */

/* A latency the application measures (publish to receive, tick to trade),
 * kept as a histogram in the process's counters file, where tb-stat shows
 * it and serves it to Prometheus (tickbus_latency_seconds{name=...}, in
 * buckets of powers of two from 64 ns).  For a dashboard; the exact tails
 * are tb_hist_*'s. */
typedef struct tb_latency tb_latency_t;

/* Exports histogram `name` ([a-z0-9_]; capitals are lowered, others become
 * '_'; at most 47 characters) of stream `id` (any number the application
 * gives it; 0 for none), role subscriber.  When the counters file cannot
 * take it, it is recorded privately, after a warning: never fails for
 * that.  Errors: TB_EINVAL (NULL argument, empty name), TB_ENOMEM. */
int tb_latency_open(tb_latency_t **lat, uint32_t id, const char *name);
/* Records `ns` nanoseconds (negative counts as 0).  Hot path: a bit scan
 * and two relaxed stores, no lock, no system call; from the one thread
 * that owns the histogram.  Errors: none. */
void tb_latency_record(tb_latency_t *lat, int64_t ns);
/* How many have been recorded.  Errors: none. */
uint64_t tb_latency_count(const tb_latency_t *lat);
/* Stops exporting and frees; the owner must have stopped recording.  NULL
 * is a no-op.  Errors: none. */
void tb_latency_close(tb_latency_t *lat);

/* ------------------------------------------------------ threads and time */

/* Pins the calling thread to `core`; warns if the core is not isolated.
 * The library's threads (heartbeat, control, recovery), those already
 * running and those started afterwards, keep off every core so pinned.
 * Errors: TB_EINVAL (no such core, or offline or not allowed to this
 * process: the message lists the allowed ones), TB_ESYS (sched_setaffinity
 * refused otherwise, e.g. EPERM). */
int tb_thread_pin(int core);

/* Nanoseconds from the calibrated invariant TSC (CLOCK_REALTIME epoch), or
 * clock_gettime where the TSC is not invariant.  Comparable across the
 * processes of one host. */
uint64_t tb_clock_now_ns(void);

/* CLOCK_MONOTONIC in nanoseconds (milliseconds): for time limits, rates and
 * intervals, never for stamps.  A system call (vDSO) each; not for the hot
 * path.  Errors: none. */
uint64_t tb_clock_mono_ns(void);
uint64_t tb_clock_mono_ms(void);

/* An idle strategy: call tb_idle_step(&idle, work) after every poll. */
typedef struct tb_idle {
	tb_idle_kind_t kind;
	uint32_t spins;     /* consecutive idle steps so far */
	uint32_t spin_max;  /* idle steps before yielding */
	uint32_t yield_max; /* idle steps before sleeping (backoff) */
	uint32_t sleep_ns;  /* current sleep (backoff) */
	uint32_t sleep_max_ns;
} tb_idle_t;

/* Sets the kind and the default bounds (bus/idle.h); the counters start at
 * 0.  Errors: none. */
void tb_idle_init(tb_idle_t *idle, tb_idle_kind_t kind);
/* Resets when `work` > 0, otherwise spins, yields or sleeps per the kind.
 * Errors: none. */
void tb_idle_step(tb_idle_t *idle, int work);

#ifdef __cplusplus
}
#endif
#endif
