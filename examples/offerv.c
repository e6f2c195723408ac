/* tb_pub_offerv: publish a burst (a packet's messages, say) with one
 * reading of the clock, and read it back in the same process.
 * Build: cc offerv.c $(pkg-config --cflags --libs tickbus) */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <unistd.h>

static void on_message(void *clientd, const tb_msg_t *m)
{
	(void)clientd;
	printf("seq %llu at %llu: %.*s\n", (unsigned long long)m->seq,
	       (unsigned long long)m->publish_ns, (int)m->len,
	       (const char *)m->data);
}

int main(void)
{
	tb_pub_msg_t burst[] = {
		{"bid 101.25", 10, 1},
		{"ask 101.50", 10, 1},
		{"trade 101.50 x 300", 18, 2},
	};
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	int k;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-example-offerv.%d",
		 (int)getpid());

	if (tb_publisher_open(&pub, &cfg) < 0 || tb_subscriber_open(&sub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}
	/* All three or, should one fail, those before it: k says how many.
	 * They carry one publish time, the burst's. */
	k = tb_pub_offerv(pub, burst, 3);
	if (k != 3) {
		fprintf(stderr, "offerv: %s\n",
			k < 0 ? tb_strerror(k) : "the burst stopped short");
		return 1;
	}
	int n = tb_sub_poll(sub, on_message, NULL, 10);

	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return n == 3 ? 0 : 1;
}
