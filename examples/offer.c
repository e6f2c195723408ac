/* tb_pub_offer: publish by copy, and read it back in the same process.
 * Build: cc offer.c $(pkg-config --cflags --libs tickbus) */
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <unistd.h>

static void on_message(void *clientd, const tb_msg_t *m)
{
	(void)clientd;
	printf("seq %llu: %.*s\n", (unsigned long long)m->seq, (int)m->len,
	       (const char *)m->data);
}

int main(void)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	int64_t seq;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-example-offer.%d",
		 (int)getpid());

	if (tb_publisher_open(&pub, &cfg) < 0 || tb_subscriber_open(&sub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}
	seq = tb_pub_offer(pub, 1, "hello", 5);
	if (seq < 0) {
		fprintf(stderr, "offer: %s\n", tb_strerror((int)seq));
		return 1;
	}
	/* The subscriber joined before the offer: it sees it on the next poll. */
	int n = tb_sub_poll(sub, on_message, NULL, 10);

	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return n == 1 ? 0 : 1;
}
