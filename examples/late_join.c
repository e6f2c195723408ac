/* Gap recovery and late join: a publisher that keeps the last messages
 * (retention) and serves them on its retention_endpoint, and a subscriber
 * that joins late, asks to start at sequence 1 (tb_sub_start_at), and gets
 * every message once, in order: the missed ones replayed (TB_MSG_F_REPLAY),
 * then the live ones.  A range nobody holds would come as TB_DATA_LOSS. */
#include <tickbus/tickbus.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

struct seen {
	uint64_t next, replayed, live, out_of_order;
};

static void on_message(void *clientd, const tb_msg_t *m)
{
	struct seen *s = clientd;

	if (m->seq != s->next)
		s->out_of_order++;
	s->next = m->seq + 1;
	if (m->flags & TB_MSG_F_REPLAY)
		s->replayed++;
	else
		s->live++;
}

/* A free loopback port for this run (a real config names a fixed one). */
static uint16_t free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 0;
	getsockname(fd, (struct sockaddr *)&sa, &len);
	close(fd);
	return ntohs(sa.sin_port);
}

int main(void)
{
	struct seen seen = {1, 0, 0, 0};
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	uint64_t first, last;
	tb_idle_t idle;
	int i;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "example");
	cfg.id = 1;
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-example-join.%d",
		 (int)getpid());
	snprintf(cfg.token, sizeof(cfg.token), "example-token");
	cfg.retention = 10000;                 /* the publisher keeps these */
	snprintf(cfg.retention_endpoint.host, sizeof(cfg.retention_endpoint.host),
		 "127.0.0.1");
	cfg.retention_endpoint.port = free_port();
	cfg.recovery[0] = cfg.retention_endpoint; /* or tb-recoveryd's */
	cfg.n_recovery = 1;

	if (tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "publisher: %s\n", tb_errmsg());
		return 1;
	}
	for (i = 1; i <= 1000; i++)            /* published before the join */
		tb_pub_offer(pub, 1, &i, sizeof(i));

	if (tb_subscriber_open(&sub, &cfg) < 0 || tb_sub_start_at(sub, 1) < 0) {
		fprintf(stderr, "subscriber: %s\n", tb_errmsg());
		return 1;
	}
	tb_idle_init(&idle, cfg.idle);
	while (seen.next <= 2000) {
		int n = tb_sub_poll(sub, on_message, &seen, 256);

		if (i <= 2000) {                /* and live ones meanwhile */
			tb_pub_offer(pub, 1, &i, sizeof(i));
			i++;
		}
		if (n == TB_DATA_LOSS && tb_sub_loss(sub, &first, &last) == 0)
			printf("lost for good: %llu..%llu\n",
			       (unsigned long long)first, (unsigned long long)last);
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	printf("delivered 1..%llu in order (%llu out of order): %llu replayed, "
	       "%llu live\n", (unsigned long long)(seen.next - 1),
	       (unsigned long long)seen.out_of_order,
	       (unsigned long long)seen.replayed, (unsigned long long)seen.live);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return seen.out_of_order == 0 && seen.replayed >= 1000 ? 0 : 1;
}
