/* Hot failover, the subscribing side: one stream taken from two copies of
 * it (publishers in one epoch, tb_publisher_open_epoch).  Each sequence is
 * delivered once, from whichever copy has it first; when copy A stops
 * short, B goes on and nothing is said; the end is told once, when both
 * have closed.  In a config file the same is `sources = quotes_a, quotes_b`
 * in the stream's section, opened with tb_subscriber_open_file. */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct seen {
	uint64_t next, n, out_of_order;
};

static void on_message(void *clientd, const tb_msg_t *m)
{
	struct seen *s = clientd;

	if (m->seq != s->next)
		s->out_of_order++;
	s->next = m->seq + 1;
	s->n++;
}

static void copy_cfg(tb_stream_cfg_t *cfg, const char *name, const char *path)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "%s", name);
	cfg->id = 7;
	cfg->transport = TB_TRANSPORT_SHM;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s.%d", path,
		 (int)getpid());
}

int main(void)
{
	struct seen seen = {1, 0, 0};
	tb_stream_cfg_t whole, copies[2];
	tb_publisher_t *pa, *pb;
	tb_subscriber_t *sub;
	tb_idle_t idle;
	int n, closed = 0;

	tb_stream_cfg_init(&whole);                  /* the stream as a whole */
	snprintf(whole.name, sizeof(whole.name), "quotes");
	whole.id = 7;
	copy_cfg(&copies[0], "quotes_a", "/dev/shm/tb-example-src-a");
	copy_cfg(&copies[1], "quotes_b", "/dev/shm/tb-example-src-b");
	if (tb_publisher_open_epoch(&pa, &copies[0], 42) < 0 ||
	    tb_publisher_open_epoch(&pb, &copies[1], 42) < 0 ||
	    tb_subscriber_open_sources(&sub, &whole, copies, 2) < 0) {
		fprintf(stderr, "%s\n", tb_errmsg());
		return 1;
	}
	for (int i = 1; i <= 1000; i++) {
		if (i <= 600)                          /* A stops at 600 */
			tb_pub_offer(pa, 1, &i, sizeof(i));
		tb_pub_offer(pb, 1, &i, sizeof(i));
	}
	tb_publisher_close(pa);
	tb_publisher_close(pb);
	tb_idle_init(&idle, TB_IDLE_BACKOFF);
	while (!closed) {
		n = tb_sub_poll(sub, on_message, &seen, 256);
		if (n == TB_CLOSED)
			closed = 1;
		else if (n < 0 && n != TB_NOT_CONNECTED)
			fprintf(stderr, "poll: %s\n", tb_strerror(n));
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	printf("delivered %llu messages, 1..%llu, %llu out of order, then "
	       "closed\n", (unsigned long long)seen.n,
	       (unsigned long long)(seen.next - 1),
	       (unsigned long long)seen.out_of_order);
	tb_subscriber_close(sub);
	unlink(copies[0].shm_path);
	unlink(copies[1].shm_path);
	return seen.n == 1000 && seen.out_of_order == 0 ? 0 : 1;
}
