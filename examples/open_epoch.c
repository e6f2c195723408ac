/* Hot failover, the publishing side: two publishers of identical copies of
 * one stream open it in one epoch, derived from what they agree on (here a
 * feed's session name and first sequence; never a clock or a pid), so that
 * the same message carries the same sequence number in both, and either
 * may stand in for the other (tb_subscriber_open_sources). */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* FNV-1a of the session, mixed with the first sequence; never 0. */
static uint64_t epoch_of(const char *session, uint64_t first_seq)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = session; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h ^= first_seq * 0x9e3779b97f4a7c15ull;
	return h ? h : 1;
}

static void copy_cfg(tb_stream_cfg_t *cfg, const char *name, const char *path)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = 7;                            /* the copies carry one id */
	cfg->transport = TB_TRANSPORT_SHM;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s.%d", path,
		 (int)getpid());
}

int main(void)
{
	uint64_t epoch = epoch_of("NASDAQ0412", 1);
	tb_stream_cfg_t a, b;
	tb_publisher_t *pa, *pb;
	int64_t sa = 0, sb = 0;

	copy_cfg(&a, "quotes_a", "/dev/shm/tb-example-epoch-a");
	copy_cfg(&b, "quotes_b", "/dev/shm/tb-example-epoch-b");
	if (tb_publisher_open_epoch(&pa, &a, epoch) < 0 ||
	    tb_publisher_open_epoch(&pb, &b, epoch) < 0) {
		fprintf(stderr, "publisher: %s\n", tb_errmsg());
		return 1;
	}
	for (int i = 0; i < 100; i++) {        /* the same input, both sides */
		sa = tb_pub_offer(pa, 1, &i, sizeof(i));
		sb = tb_pub_offer(pb, 1, &i, sizeof(i));
	}
	printf("epoch 0x%016llx on both: %s; last sequence %lld and %lld\n",
	       (unsigned long long)epoch,
	       tb_pub_epoch(pa) == tb_pub_epoch(pb) ? "yes" : "no",
	       (long long)sa, (long long)sb);
	tb_publisher_close(pa);
	tb_publisher_close(pb);
	unlink(a.shm_path);
	unlink(b.shm_path);
	/* Epoch 0 means "none" to subscribers: refused. */
	if (tb_publisher_open_epoch(&pa, &a, 0) != TB_EINVAL)
		return 1;
	return pa == NULL && sa == 100 && sb == 100 ? 0 : 1;
}
