/*
 * transport/shm.c - set-up, liveness and epochs of the shared-memory ring.
 * The per-frame paths are static inline in transport/shm.h; this file holds
 * what runs once, or only when the ring is idle.
 */
#include "bus/transport/shm.h"

#include "bus/config.h"
#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A reader idle for this long looks at the writer's liveness and the path. */
#define TB_SHM_CHECK_NS 1000000ull

/* A beat from the future (clock skew between processes) counts as fresh. */
static int beat_stale(const tb_shm_hdr_t *hdr, uint64_t now_ns, uint64_t limit_ns)
{
	int64_t age = (int64_t)(now_ns - tb_atomic_load_relaxed(&hdr->heartbeat_ns));

	return age > (int64_t)limit_ns;
}

/* 1 if the ring's writer is open and beating. */
static int ring_live(const tb_shm_hdr_t *hdr, uint64_t liveness_ns)
{
	return tb_atomic_load_acquire(&hdr->state) == TB_SHM_OPEN && /* A3 */
	       !beat_stale(hdr, tb_clock_now_ns(), liveness_ns);
}

/* Returns 1 if the ring at `path` belongs to a publisher that is running. */
static int owner_alive(const char *path, uint64_t liveness_ns)
{
	char where[TB_PATH_MAX];
	int fd = tb_mem_shared_locate(path, where, sizeof(where)) == 0 ?
		 open(where, O_RDONLY | O_CLOEXEC) : -1;
	tb_shm_hdr_t hdr;
	ssize_t got;

	if (fd < 0)
		return 0;
	got = pread(fd, &hdr, sizeof(hdr), 0);
	close(fd);
	if (got != (ssize_t)sizeof(hdr) || hdr.magic != TB_SHM_MAGIC ||
	    hdr.version != TB_SHM_VERSION || hdr.state != TB_SHM_OPEN)
		return 0;
	if (hdr.pid <= 0 || (kill(hdr.pid, 0) != 0 && errno == ESRCH))
		return 0;
	return !beat_stale(&hdr, tb_clock_now_ns(), liveness_ns);
}

/* Marks the ring now at `path`, if any, REPLACED so its readers move on. */
static void mark_replaced(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	tb_shm_hdr_t *old;

	if (fd < 0)
		return;
	old = mmap(NULL, TB_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (old == MAP_FAILED)
		return;
	if (old->magic == TB_SHM_MAGIC && old->version == TB_SHM_VERSION)
		tb_atomic_store_release(&old->state, TB_SHM_REPLACED);
	munmap(old, TB_SHM_HDR_SIZE);
}

/* `dir of where` + "/" + `basename of path`: the ring's final name beside
 * the file tb_mem actually created (on hugetlbfs, that is not /dev/shm). */
static int sibling(const char *where, const char *path, char *out, size_t len)
{
	const char *slash = strrchr(where, '/');
	const char *base = strrchr(path, '/');
	int n;

	base = base ? base + 1 : path;
	n = snprintf(out, len, "%.*s%s", slash ? (int)(slash - where + 1) : 0,
		     where, base);
	return n >= 0 && (size_t)n < len ? 0 : -1;
}

int tb_shm_writer_open(tb_shm_writer_t *w, const tb_stream_cfg_t *cfg,
		       uint64_t epoch)
{
	char path[TB_PATH_MAX], tmp[TB_PATH_MAX + 32];
	size_t len = TB_SHM_HDR_SIZE + cfg->ring_size;
	int node = cfg->subscriber_core >= 0 ?
		   tb_mem_node_of_core(cfg->subscriber_core) : -1;
	tb_shm_hdr_t *hdr;
	int rc;

	memset(w, 0, sizeof(*w));
	if (!tb_ring_size_ok(cfg->ring_size))
		return tb_error_set(TB_EINVAL, "shm: ring_size %llu is not a power of "
				  "two between 64 KiB and 1 GiB",
				  (unsigned long long)cfg->ring_size);
	if (tb_stream_cfg_shm_path(cfg, path, sizeof(path)) < 0)
		return tb_error_prepend(TB_EINVAL, "shm");
	if (owner_alive(path, (uint64_t)cfg->liveness_timeout_ms * 1000000ull))
		return tb_error_set(TB_EBUSY, "shm: %s is owned by a running "
				  "publisher; stop it or use another shm_path",
				  path);

	/* Build the ring beside the old one, then rename it into place, so a
	 * reader never sees a ring half made.  The ring goes on the NUMA node
	 * of the subscribers' core when one is configured. */
	snprintf(tmp, sizeof(tmp), "%s.%d.new", path, (int)getpid());
	rc = tb_mem_map_shared(&w->mem, tmp, len, 1, node, 0);
	if (rc < 0)
		return tb_error_prepend(rc, "shm");
	tb_info("shm: ring %s: %zu bytes on %s pages, node %d%s", path, len,
		tb_mem_page_kind_name(w->mem.page_kind), w->mem.numa_node,
		w->mem.locked ? ", locked" : "");

	hdr = w->mem.addr;
	hdr->magic = TB_SHM_MAGIC;
	hdr->hdr_size = TB_SHM_HDR_SIZE;
	hdr->ring_size = cfg->ring_size;
	hdr->epoch = epoch;
	hdr->stream_id = cfg->id;
	hdr->pid = (int32_t)getpid();
	hdr->start_ns = tb_clock_now_ns();
	hdr->max_frame = tb_ring_max_frame(cfg->ring_size);
	snprintf(hdr->name, sizeof(hdr->name), "%s", cfg->name);
	tb_atomic_store_relaxed(&hdr->tail_intent, 0);
	tb_atomic_store_relaxed(&hdr->tail, 0);
	tb_atomic_store_relaxed(&hdr->heartbeat_ns, hdr->start_ns);
	tb_atomic_store_relaxed(&hdr->state, TB_SHM_OPEN);
	tb_atomic_store_release(&hdr->version, TB_SHM_VERSION); /* last: R2 */

	if (sibling(w->mem.path, path, w->path, sizeof(w->path)) < 0) {
		rc = tb_error_set(TB_EINVAL, "shm: path %s is too long", path);
		goto fail;
	}
	mark_replaced(w->path);
	if (rename(w->mem.path, w->path) != 0) {
		rc = tb_error_sys(errno, "shm: rename %s to %s", w->mem.path, w->path);
		goto fail;
	}
	w->hdr = hdr;
	tb_ring_init(&w->tx.ring, (uint8_t *)hdr + TB_SHM_HDR_SIZE, cfg->ring_size,
		     cfg->id, &hdr->tail_intent, &hdr->tail);
	w->tx.ops = &tb_shm_tx_ops;
	return 0;
fail:
	unlink(w->mem.path);
	tb_mem_free(&w->mem);
	return rc;
}

void tb_shm_writer_beat(tb_shm_writer_t *w, uint64_t now_ns)
{
	tb_atomic_store_relaxed(&w->hdr->heartbeat_ns, now_ns);
}

void tb_shm_writer_close(tb_shm_writer_t *w, uint64_t final_seq, int unlink_it)
{
	if (!w->hdr)
		return;
	tb_atomic_store_relaxed(&w->hdr->final_seq, final_seq);
	tb_atomic_store_release(&w->hdr->state, TB_SHM_CLOSED); /* R3 */
	tb_mem_free(&w->mem);
	if (unlink_it)
		unlink(w->path);
	w->hdr = NULL;
}

/* ------------------------------------------------------------------ reader */

static void reader_unmap(tb_shm_reader_t *r)
{
	if (r->hdr)
		munmap((void *)r->hdr, r->map_len);
	r->hdr = NULL;
	r->ring = NULL;
}

int tb_shm_reader_open(tb_shm_reader_t *r, const tb_stream_cfg_t *cfg)
{
	int rc;

	memset(r, 0, sizeof(*r));
	if (tb_stream_cfg_shm_path(cfg, r->path, sizeof(r->path)) < 0)
		return tb_error_set(TB_EINVAL, "shm: stream '%s': shm_path too long",
				  cfg->name);
	r->stream_id = cfg->id;
	r->liveness_ns = (uint64_t)cfg->liveness_timeout_ms * 1000000ull;
	r->state = TB_SHM_R_WAITING;
	r->opened_ns = tb_clock_now_ns();
	rc = tb_shm_reader_attach(r, 0);
	if (rc < 0)
		return rc;
	if (r->state == TB_SHM_R_ATTACHED && !ring_live(r->hdr, r->liveness_ns)) {
		/* A ring left by a publisher that closed or died: wait for the
		 * next one as if there were none. */
		r->state = TB_SHM_R_WAITING;
		r->epoch = 0;
	}
	return 0;
}

int tb_shm_reader_attach(tb_shm_reader_t *r, int from_start)
{
	char where[TB_PATH_MAX];
	const tb_shm_hdr_t *hdr;
	struct stat st;
	uint8_t *scratch;
	size_t len;
	void *base;
	int fd;

	if (tb_mem_shared_locate(r->path, where, sizeof(where)) < 0)
		return tb_error_prepend(TB_EINVAL, "shm");
	fd = open(where, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : tb_error_sys(errno, "shm: open %s", where);
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return tb_error_sys(e, "shm: stat %s", r->path);
	}
	if (r->hdr && st.st_dev == r->dev && st.st_ino == r->ino) {
		close(fd);
		return 0; /* the same ring as before */
	}
	if ((size_t)st.st_size < TB_SHM_HDR_SIZE) {
		close(fd);
		return 0; /* being created */
	}
	/* Populated now, at attach: otherwise the reader takes a page fault
	 * on the first read of every page of the ring, on the hot path. */
	base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE,
		    fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return tb_error_sys(errno, "shm: map %s", r->path);
	hdr = base;
	len = (size_t)st.st_size;
	if (tb_atomic_load_acquire(&hdr->version) != TB_SHM_VERSION || /* A2 pairs with R2 */
	    hdr->magic != TB_SHM_MAGIC || hdr->hdr_size != TB_SHM_HDR_SIZE ||
	    !tb_ring_size_ok(hdr->ring_size) ||
	    len < TB_SHM_HDR_SIZE + hdr->ring_size || /* hugetlbfs rounds up */
	    hdr->max_frame != tb_ring_max_frame(hdr->ring_size) ||
	    hdr->stream_id != r->stream_id) {
		int code = tb_error_set(TB_EFORMAT, "shm: %s is not a tickbus ring of "
				      "stream %u (format version %u, this reader "
				      "reads %u); remove it or fix shm_path",
				      r->path, r->stream_id, hdr->version,
				      TB_SHM_VERSION);
		munmap(base, len);
		return code;
	}
	scratch = r->scratch;
	if (!scratch || r->max_frame != hdr->max_frame) {
		scratch = malloc(hdr->max_frame);
		if (!scratch) {
			munmap(base, len);
			return tb_error_set(TB_ENOMEM, "shm: no memory for a %u-byte "
					  "frame buffer", hdr->max_frame);
		}
		free(r->scratch);
	}
	reader_unmap(r);
	r->scratch = scratch;
	r->hdr = hdr;
	r->ring = (const uint8_t *)base + TB_SHM_HDR_SIZE;
	r->mask = hdr->ring_size - 1;
	r->max_frame = hdr->max_frame;
	r->map_len = len;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->pos = from_start ? 0 : tb_atomic_load_acquire(&hdr->tail); /* A1 */
	r->lapped = 0;
	r->idle_polls = 0;
	r->state = TB_SHM_R_ATTACHED;
	if (r->epoch == hdr->epoch)
		return 0;
	r->epoch = hdr->epoch;
	return 1;
}

void tb_shm_reader_close(tb_shm_reader_t *r)
{
	reader_unmap(r);
	free(r->scratch);
	r->scratch = NULL;
}

void tb_shm_reader_lap(tb_shm_reader_t *r, tb_seq_t *seq)
{
	/* Everything from the next expected sequence up to the first frame
	 * after the live tail is gone; that frame will close the range. */
	r->pos = tb_atomic_load_acquire(&r->hdr->tail); /* A1 */
	r->lapped = seq->expected != 0;
}

/* Starts a new epoch: sequence numbers from 1, the ring from its start. */
static int enter_epoch(tb_shm_reader_t *r, tb_seq_t *seq, int attached)
{
	if (attached <= 0)
		return attached;
	tb_seq_init(seq, 1);
	r->lapped = 0;
	return TB_NEW_EPOCH;
}

int tb_shm_reader_idle(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		       uint64_t now_ns)
{
	const tb_shm_hdr_t *hdr;
	uint32_t state;
	int rc;

	if (!now_ns)
		now_ns = tb_clock_now_ns();
	if (now_ns - r->last_check_ns < TB_SHM_CHECK_NS)
		return r->state == TB_SHM_R_WAITING ? TB_NOT_CONNECTED : 0;
	r->last_check_ns = now_ns;

	switch (r->state) {
	case TB_SHM_R_WAITING:
		/* No ring yet: whatever appears is read from its first frame. */
		rc = tb_shm_reader_attach(r, 1);
		if (rc < 0)
			return rc;
		if (r->state != TB_SHM_R_ATTACHED)
			return TB_NOT_CONNECTED;
		if (r->hdr->start_ns < r->opened_ns &&
		    !ring_live(r->hdr, r->liveness_ns)) {
			r->state = TB_SHM_R_WAITING;
			r->epoch = 0;
			return TB_NOT_CONNECTED;
		}
		tb_seq_init(seq, 1);
		return 0;
	case TB_SHM_R_ENDED:
		hdr = r->hdr;
		if (tb_atomic_load_acquire(&hdr->state) == TB_SHM_OPEN && /* A3 */
		    !beat_stale(hdr, now_ns, r->liveness_ns)) {
			/* Declared dead but beating again: it was starved. */
			r->state = TB_SHM_R_ATTACHED;
			return 0;
		}
		return enter_epoch(r, seq, tb_shm_reader_attach(r, 1));
	case TB_SHM_R_ATTACHED:
		break;
	}

	/* Attached and idle for a while: has the writer gone or moved on? */
	hdr = r->hdr;
	state = tb_atomic_load_acquire(&hdr->state); /* A3 pairs with R3 */
	if (tb_atomic_load_acquire(&hdr->tail) != r->pos) /* A1 */
		return 0; /* frames arrived: read them first */
	if (state != TB_SHM_OPEN && r->lapped) {
		/* Lapped, and no frame will come to close the range: the
		 * writer's final sequence does. */
		uint64_t final_seq = tb_atomic_load_relaxed(&hdr->final_seq);

		r->lapped = 0;
		if (final_seq >= seq->expected) {
			tb_seq_gap_to(seq, final_seq + 1, loss);
			return TB_LAPPED;
		}
	}
	if (state == TB_SHM_REPLACED) {
		ino_t was = r->ino;

		rc = enter_epoch(r, seq, tb_shm_reader_attach(r, 1));
		if (rc != 0)
			return rc;
		if (r->ino != was)
			return 0; /* a new ring in the same epoch: the same
				     stream goes on (tb_publisher_open_epoch) */
		r->state = TB_SHM_R_ENDED;
		return TB_CLOSED;
	}
	if (state == TB_SHM_CLOSED) {
		r->state = TB_SHM_R_ENDED;
		return TB_CLOSED;
	}
	if (beat_stale(hdr, now_ns, r->liveness_ns)) {
		r->state = TB_SHM_R_ENDED;
		return TB_PUBLISHER_DEAD;
	}
	return 0;
}

/* ------------------------------------------------------ transport ops */

static int shm_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	tb_shm_writer_t *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return tb_error_set(TB_ENOMEM, "shm: out of memory");
	rc = tb_shm_writer_open(w, cfg, epoch);
	if (rc < 0) {
		free(w);
		return rc;
	}
	*out = &w->tx;
	return 0;
}

static void shm_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	(void)last_seq;
	tb_shm_writer_beat((tb_shm_writer_t *)tx, now_ns);
}

static void shm_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	tb_shm_writer_close((tb_shm_writer_t *)tx, final_seq, 0);
	free(tx);
}

/* Committing into the shared ring is publishing: no room check (the writer
 * never waits for readers) and nothing to send. */
const tb_tx_ops_t tb_shm_tx_ops = {
	.name = "shm",
	.open = shm_tx_open,
	.room = NULL,
	.send = NULL,
	.flush = NULL,
	.beat = shm_tx_beat,
	.close = shm_tx_close,
};

static int shm_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	tb_shm_reader_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "shm: out of memory");
	rc = tb_shm_reader_open(r, cfg);
	if (rc < 0) {
		tb_shm_reader_close(r);
		free(r);
		return rc;
	}
	r->rx.ops = &tb_shm_rx_ops;
	*out = &r->rx;
	return 0;
}

static int shm_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		       tb_handler_t handler, void *clientd, int limit)
{
	return tb_shm_reader_poll((tb_shm_reader_t *)rx, seq, loss, handler,
				  clientd, limit);
}

static uint64_t shm_rx_epoch(const tb_rx_t *rx)
{
	return ((const tb_shm_reader_t *)rx)->epoch;
}

static void shm_rx_close(tb_rx_t *rx)
{
	tb_shm_reader_close((tb_shm_reader_t *)rx);
	free(rx);
}

const tb_rx_ops_t tb_shm_rx_ops = {
	.name = "shm",
	.open = shm_rx_open,
	.poll = shm_rx_poll,
	.epoch = shm_rx_epoch,
	.close = shm_rx_close,
};
