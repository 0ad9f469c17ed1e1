/*
 * LD_PRELOAD shim of the e2e guest: every IPv4 TCP socket a process connects is first bound to
 * the address in $E2E_BIND_SRC (port left to connect()), so that one process's traffic leaves
 * from an address of its own. The Ceph scenarios use it to give each gateway in the guest its
 * own client address: librados (Ceph 16) has no option that picks the source address of its
 * connections (`public_addr` and `ms_bind_before_connect` are not applied by librados' client
 * messenger: its sockets stay on the route's source address), and the monitor then records the
 * address it saw, which is what `ceph osd blocklist add` and a partition by address act on.
 *
 * Built by build-guest.sh (cc -shared) and shipped as /opt/rtgt/lib/libe2e-bindsrc.so; lib.sh's
 * `with_src_addr ADDR CMD...` uses it. A socket already bound is left alone; a bind that fails
 * fails the connect() with bind's errno, so a missing address is noticed at once.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static connect_fn real_connect;
	const char *src;
	struct sockaddr_in cur, b;
	socklen_t cl = sizeof(cur), tl;
	int type, one = 1;

	if (!real_connect)
		real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
	if (!real_connect) {
		errno = ENOSYS;
		return -1;
	}
	src = getenv("E2E_BIND_SRC");
	if (!src || !*src || !addr || addr->sa_family != AF_INET)
		return real_connect(fd, addr, len);
	tl = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
		return real_connect(fd, addr, len);
	memset(&cur, 0, sizeof(cur));
	if (getsockname(fd, (struct sockaddr *)&cur, &cl) < 0 || cur.sin_family != AF_INET ||
	    cur.sin_addr.s_addr != htonl(INADDR_ANY) || cur.sin_port != 0)
		return real_connect(fd, addr, len);
	memset(&b, 0, sizeof(b));
	b.sin_family = AF_INET;
	if (inet_pton(AF_INET, src, &b.sin_addr) != 1) {
		errno = EINVAL;
		return -1;
	}
	/* the port is chosen by connect(), per destination: no ephemeral port is used up */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&b, sizeof(b)) < 0)
		return -1;
	return real_connect(fd, addr, len);
}
