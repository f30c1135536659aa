'use strict';
/*
 * A request/response protocol over Node.js's net module, for tests/programs/test_node.py.
 * Run by Debian's /usr/bin/node (its own modules only), plain or under `ulsock run`.
 *
 *   node_frames.js server PORT CONNS
 *   node_frames.js client PORT CONNS REQUESTS SEED
 *
 * Requests: payload length (u32, big-endian), tag (u32), payload. Responses: tag (u32),
 * SHA-256 of the payload (32 bytes), payload length (u32), the payload again. The client
 * opens CONNS connections at once and writes all of a connection's requests before it
 * reads (the server's answers queue behind them), payloads of 0 bytes to 1 MiB from a
 * seeded generator with one of exactly 1 MiB per connection, then half-closes; it checks
 * every tag, digest and byte. The server exits after CONNS connections ended: status 0
 * and "SERVED conns= requests= rx= tx= errors=0", 1 otherwise. The client exits 0 with
 * "OK conns= failed=0 requests= tx= rx=", 1 otherwise.
 */
const net = require('net');
const crypto = require('crypto');

const MAX = 1 << 20;

/* Appends chunks and hands out exact byte counts. */
class Reader {
	constructor() { this.bufs = []; this.len = 0; }
	push(b) { this.bufs.push(b); this.len += b.length; }
	take(n) {
		if (this.len < n)
			return null;
		const all = this.bufs.length === 1 ? this.bufs[0] : Buffer.concat(this.bufs);
		const out = all.subarray(0, n);
		const rest = all.subarray(n);
		this.bufs = rest.length ? [rest] : [];
		this.len = rest.length;
		return out;
	}
}

/* A small deterministic generator (xorshift32), so a failure can be replayed. */
function rng(seed) {
	let x = (seed >>> 0) || 1;
	return () => {
		x ^= x << 13; x >>>= 0;
		x ^= x >>> 17;
		x ^= x << 5; x >>>= 0;
		return x;
	};
}

function server(port, conns) {
	const st = { conns: 0, requests: 0, rx: 0, tx: 0, errors: 0 };
	const srv = net.createServer((s) => {
		const r = new Reader();
		let head = null;
		s.on('data', (d) => {
			st.rx += d.length;
			r.push(d);
			for (;;) {
				if (!head) {
					const h = r.take(8);
					if (!h)
						break;
					head = { len: h.readUInt32BE(0), tag: h.readUInt32BE(4) };
					if (head.len > MAX) {
						st.errors++;
						s.destroy();
						return;
					}
				}
				const body = r.take(head.len);
				if (!body)
					break;
				const resp = Buffer.alloc(40);
				resp.writeUInt32BE(head.tag, 0);
				crypto.createHash('sha256').update(body).digest().copy(resp, 4);
				resp.writeUInt32BE(body.length, 36);
				s.write(resp);
				s.write(body);
				st.tx += resp.length + body.length;
				st.requests++;
				head = null;
			}
		});
		s.on('end', () => {
			if (head || r.len)
				st.errors++;
			s.end();
		});
		s.on('error', () => { st.errors++; });
		s.on('close', () => {
			if (++st.conns === conns) {
				console.log(`SERVED conns=${st.conns} requests=${st.requests} rx=${st.rx} ` +
					    `tx=${st.tx} errors=${st.errors}`);
				srv.close();
				process.exitCode = st.errors ? 1 : 0;
			}
		});
	});
	srv.listen(port, '127.0.0.1', () => console.log(`listening ${port}`));
}

function client(port, conns, requests, seed) {
	const st = { conns: 0, failed: 0, requests: 0, tx: 0, rx: 0 };
	let left = conns;
	const fail = (i, why) => {
		console.log(`FAIL conn ${i}: ${why}`);
		st.failed++;
	};
	const done = () => {
		if (--left)
			return;
		console.log(`OK conns=${st.conns} failed=${st.failed} requests=${st.requests} ` +
			    `tx=${st.tx} rx=${st.rx}`);
		process.exitCode = st.failed ? 1 : 0;
	};
	for (let i = 0; i < conns; i++) {
		const next = rng(seed * 7919 + i);
		const sent = [];
		const s = net.connect(port, '127.0.0.1', () => {
			const big = next() % requests;
			for (let k = 0; k < requests; k++) {
				const len = k === big ? MAX : next() % (MAX / 8);
				const body = crypto.randomBytes(len);
				const head = Buffer.alloc(8);
				head.writeUInt32BE(len, 0);
				head.writeUInt32BE(i * 1000 + k, 4);
				s.write(head);
				s.write(body);
				st.tx += 8 + len;
				sent.push({ tag: i * 1000 + k, body });
			}
			s.end();
		});
		const r = new Reader();
		let head = null, got = 0, bad = false;
		s.on('data', (d) => {
			st.rx += d.length;
			r.push(d);
			for (;;) {
				if (!head) {
					const h = r.take(40);
					if (!h)
						break;
					head = { tag: h.readUInt32BE(0), sum: h.subarray(4, 36),
						 len: h.readUInt32BE(36) };
				}
				const body = r.take(head.len);
				if (!body)
					break;
				const want = sent[got];
				if (!want || head.tag !== want.tag || !body.equals(want.body) ||
				    !crypto.createHash('sha256').update(body).digest().equals(head.sum)) {
					if (!bad)
						fail(i, `response ${got} differs`);
					bad = true;
				}
				got++;
				head = null;
			}
		});
		s.on('end', () => {
			if (!bad && (got !== requests || r.len || head))
				fail(i, `${got} of ${requests} responses, ${r.len} bytes left over`);
			else if (!bad)
				st.requests += got;
			st.conns++;
		});
		s.on('error', (e) => { fail(i, e.message); bad = true; });
		s.on('close', done);
	}
}

const [mode, port, conns, requests, seed] = process.argv.slice(2);
if (mode === 'server')
	server(+port, +conns);
else
	client(+port, +conns, +requests, +seed);
