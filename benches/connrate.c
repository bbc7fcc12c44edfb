/*
 * New-connection load generator for benches/connrate.sh (a benchmark, not a test).
 *
 *   connrate serve ADDR PORT           accept, write "ok\n", close (one thread per CPU)
 *   connrate load ADDR PORT SECONDS THREADS
 *                                      THREADS loops of connect / send a request / read
 *                                      until the server closes / close, for SECONDS;
 *                                      prints "connections errors per_second"
 *
 * The server closes first, so TIME_WAIT stays on the server side and the client never
 * runs out of ports. IPv4 and IPv6 (an address with ':').
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_storage target;
static socklen_t target_len;
static atomic_long done, failed;
static atomic_int stop;

static int parse_addr(const char *addr, const char *port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(addr, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((unsigned short)atoi(port));
		*len = sizeof(*a);
		return inet_pton(AF_INET6, addr, &a->sin6_addr) == 1 ? 0 : -1;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	a->sin_family = AF_INET;
	a->sin_port = htons((unsigned short)atoi(port));
	*len = sizeof(*a);
	return inet_pton(AF_INET, addr, &a->sin_addr) == 1 ? 0 : -1;
}

static void *serve_loop(void *arg)
{
	int ls = *(int *)arg;
	for (;;) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			continue;
		char buf[256];
		(void)!read(c, buf, sizeof(buf));
		(void)!write(c, "ok\n", 3);
		close(c);
	}
	return NULL;
}

static int serve(const char *addr, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (parse_addr(addr, port, &ss, &len) < 0) {
		fprintf(stderr, "connrate: bad address %s\n", addr);
		return 2;
	}
	int ls = socket(ss.ss_family, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&ss, len) < 0 || listen(ls, 4096) < 0) {
		perror("connrate: bind/listen");
		return 1;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		n = 1;
	for (long i = 1; i < n; i++) {
		pthread_t t;
		pthread_create(&t, NULL, serve_loop, &ls);
	}
	serve_loop(&ls);
	return 0;
}

static void *load_loop(void *arg)
{
	(void)arg;
	static const char req[] = "GET / HTTP/1.0\r\n\r\n";
	while (!atomic_load(&stop)) {
		int s = socket(target.ss_family, SOCK_STREAM, 0);
		if (s < 0) {
			atomic_fetch_add(&failed, 1);
			continue;
		}
		struct timeval tv = {.tv_sec = 2};
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		int ok = connect(s, (struct sockaddr *)&target, target_len) == 0 &&
			 write(s, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1);
		char buf[64];
		ssize_t r, got = 0;
		while (ok && (r = read(s, buf, sizeof(buf))) > 0)
			got += r;
		close(s);
		if (ok && got == 3)
			atomic_fetch_add(&done, 1);
		else
			atomic_fetch_add(&failed, 1);
	}
	return NULL;
}

static int load(const char *addr, const char *port, double seconds, int threads)
{
	if (parse_addr(addr, port, &target, &target_len) < 0) {
		fprintf(stderr, "connrate: bad address %s\n", addr);
		return 2;
	}
	pthread_t *ts = calloc((size_t)threads, sizeof(*ts));
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < threads; i++)
		pthread_create(&ts[i], NULL, load_loop, NULL);
	struct timespec d = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (long)seconds) * 1e9)};
	nanosleep(&d, NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < threads; i++)
		pthread_join(ts[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double el = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("%ld %ld %.1f\n", atomic_load(&done), atomic_load(&failed), (double)atomic_load(&done) / el);
	free(ts);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return serve(argv[2], argv[3]);
	if (argc == 6 && strcmp(argv[1], "load") == 0)
		return load(argv[2], argv[3], atof(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: connrate serve ADDR PORT | connrate load ADDR PORT SECONDS THREADS\n");
	return 2;
}
