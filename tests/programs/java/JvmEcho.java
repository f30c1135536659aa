/*
 * A TCP echo server and client for the JVM, to run unmodified under ulsock
 * (tests/programs/test_jvm.py).
 *
 *   java JvmEcho server threads|nio PORT CONNECTIONS
 *   java JvmEcho client PORT CONNECTIONS BYTES SEED
 *   java JvmEcho closer PORT BYTES SEED
 *
 * Protocol, per connection: the client sends an 8-byte big-endian length L, then L
 * bytes. The server echoes every byte as it arrives and, after the L-th, sends the
 * SHA-256 of the L bytes it received (32 bytes), then closes. The client writes from one
 * thread and reads from another, so both directions flow at once, and checks that the
 * echo has the digest of what it sent and that the server's digest is the same. A
 * corrupted, lost or reordered byte in either direction changes one of the two.
 *
 * The "threads" server gives each connection a thread with blocking java.net.Socket
 * streams; the "nio" server runs every connection in one thread on a Selector with
 * non-blocking SocketChannels, reading only while its echo is flushed. Either exits 0
 * after CONNECTIONS connections completed, printing "server done N".
 * A connection that ends before the first byte of its header counts as complete (a
 * client that gave up, as the closer's first one does).
 * The client exits 0 printing "client ok N connections M bytes" when every check held,
 * and 1 otherwise.
 *
 * The closer makes two connections. A thread blocks reading the first one, which never
 * sends a request, while the second one runs the exchange above; meanwhile the main
 * thread closes the first socket. That is how Java code stops a thread blocked on a
 * socket: the JDK replaces the descriptor with dup2 and signals the thread, which then
 * fails with "Socket closed". The closer exits 0 printing "closer ok" when the blocked
 * read failed that way and the exchange was right; the server counts 2 connections.
 */

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;

public final class JvmEcho {
	private static final int CHUNK = 64 * 1024;
	private static final int TIMEOUT_MS = 60_000;	/* a stall fails, not hangs */

	private JvmEcho() {
	}

	public static void main(String[] args) throws Exception {
		if (args.length == 4 && args[0].equals("server")) {
			int port = Integer.parseInt(args[2]);
			int count = Integer.parseInt(args[3]);
			if (args[1].equals("threads"))
				threadServer(port, count);
			else if (args[1].equals("nio"))
				nioServer(port, count);
			else
				usage();
			System.out.println("server done " + count);
		} else if (args.length == 5 && args[0].equals("client")) {
			System.exit(client(Integer.parseInt(args[1]), Integer.parseInt(args[2]),
					Long.parseLong(args[3]), Long.parseLong(args[4])) ? 0 : 1);
		} else if (args.length == 4 && args[0].equals("closer")) {
			System.exit(closer(Integer.parseInt(args[1]), Long.parseLong(args[2]),
					Long.parseLong(args[3])) ? 0 : 1);
		} else {
			usage();
		}
	}

	private static void usage() {
		System.err.println("usage: JvmEcho server threads|nio PORT CONNECTIONS\n"
				+ "       JvmEcho client PORT CONNECTIONS BYTES SEED\n"
				+ "       JvmEcho closer PORT BYTES SEED");
		System.exit(2);
	}

	private static MessageDigest sha256() {
		try {
			return MessageDigest.getInstance("SHA-256");
		} catch (NoSuchAlgorithmException e) {
			throw new IllegalStateException(e);
		}
	}

	private static InetAddress loopback() throws IOException {
		return InetAddress.getByName("127.0.0.1");
	}

	/* Thread per connection, blocking streams. */

	private static void threadServer(int port, int count) throws Exception {
		List<Thread> threads = new ArrayList<>();
		AtomicInteger failures = new AtomicInteger();
		try (ServerSocket ss = new ServerSocket(port, 50, loopback())) {
			for (int i = 0; i < count; i++) {
				Socket s = ss.accept();
				Thread t = new Thread(() -> {
					try (Socket c = s) {
						serveBlocking(c);
					} catch (IOException e) {
						failures.incrementAndGet();
						System.err.println("server connection: " + e);
					}
				}, "echo-" + i);
				t.start();
				threads.add(t);
			}
		}
		for (Thread t : threads)
			t.join();
		if (failures.get() != 0) {
			System.err.println("server: " + failures.get() + " connections failed");
			System.exit(1);
		}
	}

	private static void serveBlocking(Socket s) throws IOException {
		s.setSoTimeout(TIMEOUT_MS);
		DataInputStream in = new DataInputStream(s.getInputStream());
		OutputStream out = s.getOutputStream();
		MessageDigest md = sha256();
		byte[] header = new byte[8];
		int first = in.read(header, 0, 1);
		if (first < 0)
			return;		/* closed before asking anything */
		in.readFully(header, 1, 7);
		long left = ByteBuffer.wrap(header).getLong();
		byte[] buf = new byte[CHUNK];
		while (left > 0) {
			int n = in.read(buf, 0, (int) Math.min(buf.length, left));
			if (n < 0)
				throw new IOException("EOF with " + left + " bytes to come");
			md.update(buf, 0, n);
			out.write(buf, 0, n);
			left -= n;
		}
		out.write(md.digest());
		out.flush();
	}

	/* One thread, a Selector, non-blocking channels. */

	private static final class Conn {
		final ByteBuffer header = ByteBuffer.allocate(8);
		ByteBuffer buf = ByteBuffer.allocate(CHUNK);	/* echo still to send */
		final MessageDigest md = sha256();
		long left = -1;		/* bytes still to read, once the header is in */
		boolean finished;	/* the digest is queued behind the echo */

		Conn() {
			buf.flip();	/* empty, in draining mode */
		}
	}

	private static void nioServer(int port, int count) throws Exception {
		int done = 0;
		try (Selector sel = Selector.open();
		     ServerSocketChannel ss = ServerSocketChannel.open()) {
			ss.bind(new InetSocketAddress(loopback(), port), 50);
			ss.configureBlocking(false);
			ss.register(sel, SelectionKey.OP_ACCEPT);
			int accepted = 0;
			while (done < count) {
				if (sel.select(TIMEOUT_MS) == 0)
					throw new IOException("no event for " + TIMEOUT_MS + " ms");
				Iterator<SelectionKey> it = sel.selectedKeys().iterator();
				while (it.hasNext()) {
					SelectionKey k = it.next();
					it.remove();
					if (k.isAcceptable()) {
						SocketChannel c = ss.accept();
						if (c == null)
							continue;
						c.configureBlocking(false);
						c.register(sel, SelectionKey.OP_READ, new Conn());
						if (++accepted == count)
							k.cancel();
					} else if (step(k)) {
						k.channel().close();
						done++;
					}
				}
			}
		}
	}

	/*
	 * Moves one connection along: flushes its echo, then reads and echoes what has
	 * arrived, a bounded number of chunks at a time so that one busy connection does
	 * not hold up the others. True once the digest is out.
	 */
	private static boolean step(SelectionKey k) throws IOException {
		SocketChannel c = (SocketChannel) k.channel();
		Conn st = (Conn) k.attachment();
		for (int round = 0; round < 16; round++) {
			if (st.buf.hasRemaining()) {
				c.write(st.buf);
				if (st.buf.hasRemaining()) {
					k.interestOps(SelectionKey.OP_WRITE);
					return false;
				}
			}
			if (st.finished)
				return true;
			if (!fill(c, st))
				break;
		}
		/* Out of rounds with echo still to send (the last bytes and the digest, maybe):
		 * waiting to read would wait for ever once the client has sent everything. */
		k.interestOps(st.buf.hasRemaining() ? SelectionKey.OP_WRITE : SelectionKey.OP_READ);
		return false;
	}

	/* Reads what has arrived into st.buf, to be echoed; false when nothing had. */
	private static boolean fill(SocketChannel c, Conn st) throws IOException {
		if (st.left < 0) {
			if (c.read(st.header) < 0) {
				if (st.header.position() != 0)
					throw new IOException("EOF in the header");
				st.finished = true;	/* closed before asking anything */
				return true;
			}
			if (st.header.hasRemaining())
				return false;
			st.header.flip();
			st.left = st.header.getLong();
		}
		if (st.left > 0) {
			st.buf.clear();
			st.buf.limit((int) Math.min(st.buf.capacity(), st.left));
			int n = c.read(st.buf);
			if (n < 0)
				throw new IOException("EOF with " + st.left + " bytes to come");
			st.buf.flip();
			if (n == 0)
				return false;
			st.md.update(st.buf.array(), 0, n);
			st.left -= n;
		}
		if (st.left == 0) {
			/* The digest goes out behind the echo of the last bytes. */
			ByteBuffer all = ByteBuffer.allocate(st.buf.remaining() + 32);
			all.put(st.buf).put(st.md.digest()).flip();
			st.buf = all;
			st.finished = true;
		}
		return true;
	}

	/* The client: CONNECTIONS sockets at once, each with a writer and a reader. */

	private static boolean client(int port, int conns, long bytes, long seed) throws Exception {
		List<Thread> threads = new ArrayList<>();
		AtomicInteger ok = new AtomicInteger();
		for (int i = 0; i < conns; i++) {
			final long connSeed = seed * 1000 + i;
			Thread t = new Thread(() -> {
				try {
					if (oneConnection(port, bytes, connSeed))
						ok.incrementAndGet();
				} catch (Exception e) {
					System.err.println("client connection: " + e);
				}
			}, "client-" + i);
			t.start();
			threads.add(t);
		}
		for (Thread t : threads)
			t.join();
		if (ok.get() != conns) {
			System.err.println("client: " + (conns - ok.get()) + " of " + conns + " failed");
			return false;
		}
		System.out.println("client ok " + conns + " connections " + conns * bytes + " bytes");
		return true;
	}

	private static boolean oneConnection(int port, long bytes, long seed) throws Exception {
		try (Socket s = new Socket()) {
			s.connect(new InetSocketAddress(loopback(), port), TIMEOUT_MS);
			s.setSoTimeout(TIMEOUT_MS);
			MessageDigest sent = sha256();
			Throwable[] writeError = new Throwable[1];
			Thread writer = new Thread(() -> {
				try {
					writeAll(s.getOutputStream(), bytes, seed, sent);
				} catch (Throwable e) {
					writeError[0] = e;
				}
			}, "writer-" + seed);
			writer.start();
			MessageDigest echoed = sha256();
			InputStream in = s.getInputStream();
			byte[] buf = new byte[CHUNK];
			long left = bytes;
			while (left > 0) {
				int n = in.read(buf, 0, (int) Math.min(buf.length, left));
				if (n < 0)
					throw new IOException("EOF with " + left + " echoed bytes to come");
				echoed.update(buf, 0, n);
				left -= n;
			}
			byte[] theirs = new DataInputStream(in).readNBytes(32);
			int extra = in.read();
			writer.join();
			if (writeError[0] != null)
				throw new IOException("writer: " + writeError[0]);
			byte[] mine = sent.digest();
			boolean good = Arrays.equals(mine, echoed.digest())
					&& Arrays.equals(mine, theirs) && extra == -1;
			if (!good)
				System.err.println("connection " + seed + ": echo or digest differs"
						+ (extra != -1 ? " (bytes after the digest)" : ""));
			return good;
		}
	}

	private static boolean closer(int port, long bytes, long seed) throws Exception {
		Socket idle = new Socket();
		idle.connect(new InetSocketAddress(loopback(), port), TIMEOUT_MS);
		idle.setSoTimeout(TIMEOUT_MS);
		String[] blocked = new String[1];
		Thread reader = new Thread(() -> {
			try {
				int b = idle.getInputStream().read();
				blocked[0] = "read returned " + b;
			} catch (IOException e) {
				blocked[0] = e.toString();
			}
		}, "blocked-reader");
		reader.start();
		boolean[] good = new boolean[1];
		Thread busy = new Thread(() -> {
			try {
				good[0] = oneConnection(port, bytes, seed);
			} catch (Exception e) {
				System.err.println("busy connection: " + e);
			}
		}, "busy");
		busy.start();
		/* Once the reader waits in poll on its socket (for at most 5 s), and a little. */
		for (int i = 0; i < 500 && reader.isAlive() && !isParked(reader); i++)
			Thread.sleep(10);
		Thread.sleep(200);
		idle.close();
		reader.join();
		busy.join();
		boolean ok = good[0] && "java.net.SocketException: Socket closed".equals(blocked[0]);
		if (!ok)
			System.err.println("closer: blocked read ended with " + blocked[0]
					+ ", busy connection " + (good[0] ? "right" : "wrong"));
		else
			System.out.println("closer ok");
		return ok;
	}

	/* The thread is inside the poll of a socket read (NioSocketImpl.park). */
	private static boolean isParked(Thread t) {
		for (StackTraceElement e : t.getStackTrace())
			if (e.getMethodName().equals("park") || e.getMethodName().equals("poll"))
				return true;
		return false;
	}

	private static void writeAll(OutputStream raw, long bytes, long seed, MessageDigest md)
			throws IOException {
		DataOutputStream out = new DataOutputStream(raw);
		SplittableRandom rng = new SplittableRandom(seed);
		out.writeLong(bytes);
		byte[] buf = new byte[CHUNK];
		long left = bytes;
		while (left > 0) {
			/* Odd write sizes, so that the writes do not line up with the reads. */
			int n = (int) Math.min(1 + rng.nextInt(buf.length), left);
			for (int i = 0; i < n; i++)
				buf[i] = (byte) rng.nextInt(256);
			md.update(buf, 0, n);
			out.write(buf, 0, n);
			left -= n;
		}
		out.flush();
	}
}
