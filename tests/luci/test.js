#!/usr/bin/env node
/*
 * The luci-app-nodeportd views in a real browser (Debian's chromium, driven by
 * playwright-core), fed by a real nodeportd.
 *
 * The page is a TEST HARNESS, NOT LuCI (harness.html/harness.js: stand-ins for the few
 * LuCI client calls the views use). This script is the other side: a small HTTP server
 * standing in for uhttpd + rpcd + the native ubus object `nodeportd`. It answers
 * uhttpd's JSON-RPC `call` on /ubus, enforces the app's rpcd ACL file per session
 * (a read-only and a read-write session), strips `ubus_rpc_session` and passes the call
 * to the daemon's JSON-RPC socket, answering a refused request as the ubus object does:
 * ubus status 0 and {error: {code, reason, message: "Error from server (REASON): ..."}}.
 * The daemon runs in --dry-run in a network namespace of its own (its health check ports
 * listen there), with a state directory and socket in a temporary directory.
 *
 * Run by tests/luci/run.sh; needs root (unshare -n), the debug daemon
 * (target/debug/nodeportd, or NODEPORTD_BIN) and /usr/bin/chromium.
 * Screenshots go to NP_LUCI_SHOTS (default target/luci-screenshots).
 */
'use strict';

const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');

const root = path.resolve(__dirname, '../..');
const bin = process.env.NODEPORTD_BIN || path.join(root, 'target/debug/nodeportd');
const app = path.join(root, 'openwrt-package/luci-app-nodeportd');
const viewDir = path.join(app, 'htdocs/luci-static/resources/view');
const aclFile = path.join(app, 'root/usr/share/rpcd/acl.d/luci-app-nodeportd.json');
const uciFile = path.join(root, 'openwrt-package/nodeportd/files/nodeportd.config');
const initFile = path.join(root, 'openwrt-package/nodeportd/files/nodeportd.init');
const shots = process.env.NP_LUCI_SHOTS || path.join(root, 'target/luci-screenshots');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'np-luci-'));
const sock = path.join(tmp, 'nodeportd.sock');
const cleanups = [];
let passed = 0;

function ok(name) {
	passed++;
	console.log('ok - ' + name);
}

/* ---- the daemon ---------------------------------------------------------------- */

/* One JSON-RPC request on the daemon's socket. */
function daemon(method, params) {
	return new Promise((resolve, reject) => {
		const c = net.createConnection(sock);
		let buf = '';
		c.on('connect', () => c.write(JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: params || {} }) + '\n'));
		c.on('data', (d) => {
			buf += d;
			const nl = buf.indexOf('\n');
			if (nl >= 0) {
				c.end();
				resolve(JSON.parse(buf.slice(0, nl)));
			}
		});
		c.on('error', reject);
	});
}

async function daemonOk(method, params) {
	const r = await daemon(method, params);
	if (r.error)
		throw new Error(`${method}: ${JSON.stringify(r.error)}`);
	return r.result;
}

function startDaemon() {
	const cfg = path.join(tmp, 'nodeportd.toml');
	fs.writeFileSync(cfg, [
		'node_name = "luci-test"',
		`socket = ${JSON.stringify(sock)}`,
		`state_dir = ${JSON.stringify(path.join(tmp, 'state'))}`,
		'service_node_port_range = "30000-32767"',
		'service_cluster_ip_ranges = ["10.96.0.0/16", "fd00:96::/112"]',
		'nodeport_addresses = ["198.18.0.0/15", "iface:np0", "2001:db8::/32", "iface:np-absent0"]',
		''
	].join('\n'));
	const log = fs.openSync(path.join(tmp, 'daemon.log'), 'w');
	/* Its own network namespace, with test addresses on a veth device: its addresses and
	 * health check ports are there, not on this machine. */
	const netns = [ 'ip link set lo up', 'ip link add np0 type veth peer name np1', 'ip addr add 198.18.0.1/24 dev np0',
		'ip -6 addr add 2001:db8::1/64 dev np0 nodad', 'ip link set np0 up', 'ip link set np1 up', 'exec "$0" "$@"' ].join(' && ');
	const p = spawn('unshare', [ '-n', 'sh', '-c', netns, bin, '--config', cfg, '--dry-run' ],
		{ stdio: [ 'ignore', 'ignore', log ] });
	cleanups.push(() => p.kill('SIGTERM'));
	return new Promise((resolve, reject) => {
		const t0 = Date.now();
		const wait = () => {
			if (p.exitCode !== null)
				return reject(new Error(`nodeportd exited ${p.exitCode}: ${fs.readFileSync(path.join(tmp, 'daemon.log'), 'utf8')}`));
			if (fs.existsSync(sock))
				return resolve(p);
			if (Date.now() - t0 > 15000)
				return reject(new Error('nodeportd did not create its socket in 15 s'));
			setTimeout(wait, 50);
		};
		wait();
	});
}

/* nodeportctl, the real client, for wording the test compares against. */
function nodeportctl(args, input) {
	return spawnSync(bin, [ 'ctl' ].concat(args), { input, encoding: 'utf8', env: Object.assign({}, process.env, { NODEPORTD_SOCKET: sock }) });
}

/* ---- the stand-in for uhttpd + rpcd + the ubus object ------------------------------ */

const acl = JSON.parse(fs.readFileSync(aclFile, 'utf8'))['luci-app-nodeportd'];
const calls = [];
const initActions = [];

function granted(mode, object, method) {
	const sets = mode === 'write' ? [ acl.read, acl.write ] : [ acl.read ];
	return sets.some((s) => s && s.ubus && Array.isArray(s.ubus[object]) && s.ubus[object].includes(method));
}

function uciGranted(mode, config) {
	const sets = mode === 'write' ? [ acl.read, acl.write ] : [ acl.read ];
	return sets.some((s) => s && Array.isArray(s.uci) && s.uci.includes(config));
}

/* /etc/config syntax, enough for the package's own file: what `ubus call uci get` returns. */
function parseUci(text) {
	const values = {};
	let cur = null, anon = 0;
	const words = (line) => (line.match(/'[^']*'|"[^"]*"|[^\s#]+/g) || []).map((w) => w.replace(/^['"]|['"]$/g, ''));
	for (const raw of text.split('\n')) {
		const line = raw.replace(/^\s+/, '');
		if (line === '' || line[0] === '#')
			continue;
		const w = words(line.replace(/\s#.*$/, ''));
		if (w[0] === 'config') {
			const name = w[2] || `cfg${(anon++).toString(16)}`;
			cur = values[name] = { '.name': name, '.type': w[1], '.anonymous': !w[2] };
		}
		else if (w[0] === 'option' && cur)
			cur[w[1]] = w[2];
		else if (w[0] === 'list' && cur)
			(cur[w[1]] = cur[w[1]] || []).push(w[2]);
	}
	return values;
}

async function ubusCall(mode, object, method, args) {
	calls.push({ mode, object, method });
	if (object === 'uci' && method === 'get') {
		if (!uciGranted(mode, args.config))
			return { denied: true };
		return { result: [ 0, { values: parseUci(fs.readFileSync(uciFile, 'utf8')) } ] };
	}
	if (!granted(mode, object, method))
		return { denied: true };
	if (object === 'luci' && method === 'getLEDs')
		return { result: [ 0, { 'green:status': { brightness: 0 }, 'amber:wan': { brightness: 0 } } ] };
	if (object === 'luci' && method === 'setInitAction') {
		initActions.push(args);
		return { result: [ 0, { result: true } ] };
	}
	if (object !== 'nodeportd')
		return { notFound: true };
	const rpcMethod = method === 'status' ? 'status' : method.replace(/^(service|endpoints)_/, '$1.');
	const params = Object.assign({}, args);
	delete params.ubus_rpc_session;
	let r;
	try {
		r = await daemon(rpcMethod, params);
	}
	catch (e) {
		/* No daemon, no object: what uhttpd answers for an object ubusd does not know. */
		return { notFound: true };
	}
	if (r.error) {
		const reason = r.error.data && r.error.data.reason;
		const err = { code: r.error.code, message: `Error from server (${reason || r.error.code}): ${r.error.message}` };
		if (reason)
			err.reason = reason;
		return { result: [ 0, { error: err } ] };
	}
	return { result: [ 0, r.result ] };
}

function serve() {
	const files = { '/harness.html': 'text/html', '/harness.js': 'text/javascript' };
	const server = http.createServer((req, res) => {
		const url = new URL(req.url, 'http://x');
		const send = (code, type, body) => { res.writeHead(code, { 'Content-Type': type }); res.end(body); };
		if (req.method === 'GET' && files[url.pathname])
			return send(200, files[url.pathname], fs.readFileSync(path.join(__dirname, url.pathname)));
		const m = url.pathname.match(/^\/view\/(nodeportd\/[a-z]+\.js)$/);
		if (req.method === 'GET' && m)
			return send(200, 'text/javascript', fs.readFileSync(path.join(viewDir, m[1])));
		if (req.method === 'POST' && url.pathname === '/ubus') {
			let body = '';
			req.on('data', (d) => { body += d; });
			req.on('end', async () => {
				const msg = JSON.parse(body);
				const [ sid, object, method, args ] = msg.params;
				const mode = { 'session-read': 'read', 'session-write': 'write' }[sid];
				const r = mode ? await ubusCall(mode, object, method, Object.assign({ ubus_rpc_session: sid }, args))
					: { denied: true };
				const reply = { jsonrpc: '2.0', id: msg.id };
				if (r.denied)
					reply.error = { code: -32002, message: 'Access denied' };
				else if (r.notFound)
					reply.error = { code: -32000, message: 'Object not found' };
				else
					reply.result = r.result;
				send(200, 'application/json', JSON.stringify(reply));
			});
			return;
		}
		send(404, 'text/plain', 'not found');
	});
	return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
		cleanups.push(() => server.close());
		resolve(server.address().port);
	}));
}

/* ---- the test ------------------------------------------------------------------ */

function service(name, spec, extra) {
	return Object.assign({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec }, extra || {});
}

function slice(name, svc, endpoints, port) {
	return {
		apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', addressType: 'IPv4',
		metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': svc } },
		endpoints, ports: [ { name: '', port, protocol: 'TCP' } ]
	};
}

async function seed() {
	for (const f of [ 'web-service.json', 'web-endpointslice.json' ]) {
		const obj = JSON.parse(fs.readFileSync(path.join(root, 'configs', f), 'utf8'));
		await daemonOk(obj.kind === 'Service' ? 'service.apply' : 'endpoints.apply', { object: obj });
	}
	/* externalTrafficPolicy Local: a health check port; one of two endpoints ready. */
	await daemonOk('service.apply', { object: service('edge', {
		type: 'LoadBalancer', externalTrafficPolicy: 'Local', ports: [ { port: 443, targetPort: 8443, protocol: 'TCP' } ] }) });
	await daemonOk('endpoints.apply', { object: slice('edge-1', 'edge', [
		{ addresses: [ '198.18.3.1' ], conditions: { ready: true }, nodeName: 'luci-test' },
		{ addresses: [ '198.18.3.2' ], conditions: { ready: false }, nodeName: 'luci-test' } ], 8443) });
	/* Two Services claim the same externalIP and port: a contested key. */
	for (const n of [ 'claim-a', 'claim-b' ])
		await daemonOk('service.apply', { object: service(n, { type: 'ClusterIP', externalIPs: [ '198.18.5.5' ], ports: [ { port: 80, protocol: 'TCP' } ] }) });
}

async function open(page, port, view, mode) {
	await page.goto(`http://127.0.0.1:${port}/harness.html?view=${view}&acl=${mode}`);
	await page.waitForFunction(() => window.__harness && window.__harness.ready, null, { timeout: 15000 });
	const errors = await page.evaluate(() => window.__harness.errors);
	assert.deepEqual(errors, [], `${view} (${mode}) loaded without errors`);
}

/* The cells of a table, as text. */
function rows(page, id) {
	return page.evaluate((id) => Array.from(document.querySelectorAll(`#${id} tr:not(.table-titles)`))
		.map((tr) => Array.from(tr.children).map((td) => td.textContent.trim())), id);
}

function portsOf(spec) {
	return spec.ports.map((p) => p.nodePort ? `${p.port}:${p.nodePort}/${p.protocol}` : `${p.port}/${p.protocol}`).join(', ');
}

async function statusPage(page, port) {
	await open(page, port, 'nodeportd/status', 'write');
	const st = await daemonOk('status');
	const svcs = (await daemonOk('service.list')).items;

	const table = await rows(page, 'nodeportd-services');
	assert.equal(table.length, svcs.length, 'one row per Service');
	for (const s of svcs) {
		const row = table.find((r) => r[0] === s.metadata.namespace && r[1] === s.metadata.name);
		assert.ok(row, `a row for ${s.metadata.name}`);
		assert.equal(row[2], s.spec.type);
		assert.equal(row[3], s.spec.clusterIPs.join(', '));
		assert.equal(row[4], portsOf(s.spec));
		assert.equal(row[6], s.spec.healthCheckNodePort ? String(s.spec.healthCheckNodePort) : '-');
	}
	const web = svcs.find((s) => s.metadata.name === 'web');
	assert.match(table.find((r) => r[1] === 'web')[4], new RegExp(`^80:${web.spec.ports[0].nodePort}/TCP$`));
	assert.equal(table.find((r) => r[1] === 'web')[5], '2/2');
	assert.equal(table.find((r) => r[1] === 'edge')[5], '1/2');
	assert.equal(table.find((r) => r[1] === 'claim-a')[5], '0/0');
	ok('services table: namespace, name, type, ClusterIPs, ports as 80:NODEPORT/TCP, endpoints ready/total, health check port');

	const addrs = await rows(page, 'nodeportd-addresses');
	assert.deepEqual(addrs.map((r) => r[0]), st.node.selectors.map((s) => s.address));
	assert.deepEqual(addrs.map((r) => r[2]), st.node.selectors.map((s) => s.selectors.join(', ')));
	const unmatched = await page.textContent('#nodeportd-unmatched');
	assert.deepEqual(st.node.unmatchedSelectors, [ 'iface:np-absent0' ]);
	assert.ok(unmatched.includes('iface:np-absent0'), unmatched);
	ok('node addresses with the selectors that picked them; unmatched selectors');

	const bands = await page.$$eval('#nodeportd-bands .nodeportd-band', (els) => els.map((e) => [ Number(e.dataset.used), Number(e.dataset.size), e.querySelector('.cbi-progressbar > div').style.width ]));
	const want = [ st.nodePorts.static, st.nodePorts.dynamic ].concat(...st.serviceCIDRs.map((c) => [ c.static, c.dynamic ]));
	assert.equal(want.length, 6, 'two NodePort bands and two per service CIDR (IPv4 and IPv6)');
	assert.deepEqual(bands.map((b) => [ b[0], b[1] ]), want.map((b) => [ b.used, b.used + b.free ]));
	assert.ok(bands.some((b) => b[0] > 0 && parseFloat(b[2]) > 0), 'a used band has a visible bar');
	ok('NodePort and ClusterIP bands as bars (static and dynamic), figures from status');

	assert.equal(st.dataplane.inSync, true);
	assert.equal(await page.textContent('#nodeportd-insync'), 'In sync');
	const dpText = await page.textContent('#nodeportd-dataplane');
	assert.ok(dpText.includes(`generation ${st.dataplane.generation}, took ${st.dataplane.lastSyncMillis} ms`), dpText);
	/* When the last sync ran: the daemon's own figure (seconds ago, monotonic), shown as a
	 * duration and the browser's clock time. */
	const ago = st.dataplane.lastSyncSecondsAgo;
	assert.ok(Number.isInteger(ago) && ago >= 0 && ago <= st.uptimeSeconds, `lastSyncSecondsAgo ${ago}`);
	const lastSync = await page.textContent('#nodeportd-lastsync');
	const m = /^(?:(\d+)d )?(?:(\d+)h )?(\d+)m (\d+)s ago \(.+\)$/.exec(lastSync);
	assert.ok(m, lastSync);
	const shown = ((Number(m[1] || 0) * 24 + Number(m[2] || 0)) * 60 + Number(m[3])) * 60 + Number(m[4]);
	assert.ok(Math.abs(shown - ago) <= 10, `shown ${shown} s, status said ${ago} s`);
	assert.ok(dpText.includes('inet nodeportd (dry run: nothing is programmed)'), dpText);
	assert.ok(dpText.includes('luci-test'), dpText);
	ok('dataplane state: in sync, generation, last sync and when it ran');

	const conflicts = await page.$$eval('#nodeportd-conflicts li', (els) => els.map((e) => e.textContent));
	assert.ok(st.dataplane.conflicts.length > 0, 'the daemon reports the contested externalIP');
	assert.deepEqual(conflicts, st.dataplane.conflicts.concat(st.problems));
	assert.ok(conflicts.some((c) => c.includes('198.18.5.5')), conflicts.join('\n'));
	const hc = await rows(page, 'nodeportd-healthchecks');
	assert.deepEqual(hc.map((r) => r[0]), st.healthChecks.map((h) => String(h.port)));
	assert.ok(hc.some((r) => r[1] === 'default/edge'), JSON.stringify(hc));
	ok('contested keys and health check ports');

	fs.mkdirSync(shots, { recursive: true });
	await page.screenshot({ path: path.join(shots, 'status.png'), fullPage: true });

	/* An idle poll asks for the status only; the lists follow a change. */
	let before = calls.length;
	await page.evaluate(() => window.__harness.poll());
	assert.deepEqual(calls.slice(before).map((c) => c.method), [ 'status' ], 'an idle poll is one status call');

	/* Live: a Service applied behind the page's back shows at the next poll. */
	await daemonOk('service.apply', { object: service('late', { type: 'NodePort', ports: [ { port: 8080, protocol: 'TCP' } ] }) });
	assert.ok(!(await rows(page, 'nodeportd-services')).some((r) => r[1] === 'late'));
	before = calls.length;
	await page.evaluate(() => window.__harness.poll());
	assert.deepEqual(calls.slice(before).map((c) => c.method).sort(), [ 'endpoints_list', 'service_list', 'status' ]);
	assert.ok((await rows(page, 'nodeportd-services')).some((r) => r[1] === 'late'), 'the poll shows the new Service');
	ok('refreshed by the poll: the status alone while idle, the lists after a change');
}

async function applyText(page, obj) {
	await page.fill('#nodeportd-apply-text', typeof obj === 'string' ? obj : JSON.stringify(obj));
	await page.click('#nodeportd-apply');
	await page.waitForFunction(() => document.querySelector('#nodeportd-apply-result').childElementCount > 0 &&
		!document.querySelector('#nodeportd-apply').disabled);
	return page.$$eval('#nodeportd-apply-result > *', (els) => els.map((e) => ({ cls: e.className, text: e.textContent })));
}

async function actions(page) {
	/* Refused: the daemon's words, exactly as `nodeportctl rpc` (the rpcd plugin's path) prints them. */
	const bad = service('bad', { type: 'NodePort', ports: [ { port: 80, nodePort: 20000, protocol: 'TCP' } ] });
	const ctl = nodeportctl([ 'rpc', 'service.apply', '-' ], JSON.stringify({ object: bad }));
	assert.notEqual(ctl.status, 0);
	let out = await applyText(page, bad);
	assert.deepEqual(out, [ { cls: 'nodeportd-error', text: ctl.stderr.trim() } ]);
	assert.match(out[0].text, /^Error from server \(Invalid\): Service "bad" is invalid: spec\.ports\[0\]\.nodePort: Invalid value: 20000/);
	assert.equal((await daemon('service.get', { name: 'bad' })).error.data.reason, 'NotFound', 'a refused apply changes nothing');
	ok('a refused apply shows the daemon\'s error verbatim');

	/* The daemon echoes bad values: they are text, never markup. */
	out = await applyText(page, service('html', { type: '<img id=pwn src=x>', ports: [ { port: 80 } ] }));
	assert.equal(out[0].cls, 'nodeportd-error');
	assert.ok(out[0].text.includes('<img id=pwn src=x>'), out[0].text);
	assert.equal(await page.$('#pwn'), null, 'no element from the daemon\'s text');
	out = await applyText(page, '{"kind": "Service",');
	assert.equal(out[0].cls, 'nodeportd-error');
	assert.match(out[0].text, /^Not JSON: /);
	ok('error text is escaped; a paste that is not JSON is refused before any call');

	out = await applyText(page, service('api', { type: 'NodePort', ports: [ { port: 80, targetPort: 8080, protocol: 'TCP' } ] }));
	assert.deepEqual(out, [ { cls: 'nodeportd-applied', text: 'service/default/api created' } ]);
	const api = (await daemonOk('service.get', { name: 'api' })).object;
	out = await applyText(page, slice('api-1', 'api', [ { addresses: [ '198.18.4.1' ], conditions: { ready: true } } ], 8080));
	assert.deepEqual(out, [ { cls: 'nodeportd-applied', text: 'endpointslice/default/api-1 created' } ]);
	const apiRow = (await rows(page, 'nodeportd-services')).find((r) => r[1] === 'api');
	assert.deepEqual(apiRow.slice(0, 6), [ 'default', 'api', 'NodePort', api.spec.clusterIP, `80:${api.spec.ports[0].nodePort}/TCP`, '1/1' ]);
	ok('apply a pasted Service and EndpointSlice; the table follows');

	/* A List, as kubectl get -o json prints it: each item in turn. */
	out = await applyText(page, { apiVersion: 'v1', kind: 'List', items: [
		service('list-a', { type: 'ClusterIP', ports: [ { port: 53, protocol: 'UDP' } ] }),
		service('list-b', { type: 'NodePort', ports: [ { port: 80, nodePort: 1, protocol: 'TCP' } ] }) ] });
	assert.deepEqual(out.map((o) => o.cls), [ 'nodeportd-applied', 'nodeportd-error' ]);
	assert.equal(out[0].text, 'service/default/list-a created');
	ok('apply a List: one line per item, refusals in their place');

	await page.click('#nodeportd-services tr:has(td:text-is("api")) button');
	await page.click('#nodeportd-confirm-delete');
	await page.waitForFunction(() => !document.getElementById('modal'));
	await page.waitForFunction(() => !Array.from(document.querySelectorAll('#nodeportd-services td')).some((td) => td.textContent === 'api'));
	assert.equal((await daemon('service.get', { name: 'api' })).error.data.reason, 'NotFound');
	ok('delete a Service after confirmation');
}

async function readOnly(page, port) {
	const before = calls.length;
	await open(page, port, 'nodeportd/status', 'read');
	const buttons = await page.$$eval('#nodeportd-status button, #nodeportd-status textarea', (els) => els.map((e) => e.disabled));
	assert.ok(buttons.length >= 3, 'delete buttons, the apply button and the text area');
	assert.ok(buttons.every((d) => d), 'all disabled for a read-only session');
	const denied = await page.evaluate(() => fetch('/ubus', { method: 'POST', body: JSON.stringify({
		jsonrpc: '2.0', id: 1, method: 'call', params: [ 'session-read', 'nodeportd', 'service_delete', { name: 'web' } ] }) }).then((r) => r.json()));
	assert.equal(denied.error.code, -32002, 'the ACL gives a read-only session no delete');
	assert.ok(calls.slice(before).filter((c) => c.mode === 'read' && c.object === 'nodeportd').every((c) => /^(status|service_list|endpoints_list|service_delete)$/.test(c.method)));
	assert.ok((await daemon('service.get', { name: 'web' })).result, 'web is still there');
	await page.screenshot({ path: path.join(shots, 'status-readonly.png'), fullPage: true });
	ok('read-only ACL: buttons disabled, write calls refused');
}

/* What --check-config says of one TOML text. */
function checkConfig(text, ext) {
	const f = path.join(tmp, 'check' + (ext || '.toml'));
	fs.writeFileSync(f, text);
	return spawnSync(bin, [ '--check-config', '--config', f ], { encoding: 'utf8' }).status === 0;
}

async function settingsPage(page, port) {
	await open(page, port, 'nodeportd/settings', 'write');
	const opts = await page.evaluate(() => Object.keys(window.__harness.options));
	assert.deepEqual(opts.sort(), [
		'init.reload_interface', 'main.log_level', 'main.node_ip', 'main.node_name', 'main.nodeport_addresses',
		'main.service_cluster_ip_ranges', 'main.service_node_port_range', 'main.socket_group', 'main.status_led'
	]);
	const shown = await page.$$eval('.cbi-value', (els) => els.map((e) => [ e.dataset.option,
		Array.from(e.querySelectorAll('input, select')).map((i) => i.value).filter((v) => v !== '') ]));
	const uci = parseUci(fs.readFileSync(uciFile, 'utf8'));
	for (const [ opt, vals ] of shown) {
		const sid = opt === 'reload_interface' ? 'init' : 'main';
		const want = uci[sid][opt] == null ? [] : [].concat(uci[sid][opt]);
		assert.deepEqual(vals, want, `${opt} shows the value of ${path.basename(uciFile)}`);
	}
	assert.deepEqual(await page.$$('.cbi-input-invalid'), [], 'the shipped config passes the page\'s checks');
	assert.ok((await page.$$('input[disabled], select[disabled]')).length === 0);
	await page.screenshot({ path: path.join(shots, 'settings.png'), fullPage: true });
	ok('settings: the options the daemon reads, with the values of the shipped /etc/config/nodeportd');

	/* Every option on the page is one the daemon (or its init script) reads: a config
	 * with each set to an example value passes the daemon's strict UCI parser. */
	const sample = { status_led: 'green:status', log_level: 'debug' };
	const lines = { main: [ 'config nodeportd \'main\'' ], init: [ 'config init \'init\'' ] };
	for (const key of opts) {
		const [ sid, opt ] = key.split('.');
		const info = await page.evaluate((k) => {
			const o = window.__harness.options[k];
			return { widget: o.constructor.name, placeholder: o.placeholder };
		}, key);
		const v = sample[opt] || info.placeholder;
		assert.ok(v, `an example value for ${key}`);
		lines[sid].push(`\t${info.widget === 'DynamicList' ? 'list' : 'option'} ${opt} '${v}'`);
	}
	const uciText = lines.main.concat([ '' ], lines.init).join('\n') + '\n';
	const r = spawnSync(bin, [ '--check-config', '--config', writeTmp('uci-all', uciText) ], { encoding: 'utf8' });
	assert.equal(r.status, 0, `daemon accepts every option of the page:\n${uciText}\n${r.stderr}`);
	const init = fs.readFileSync(initFile, 'utf8');
	for (const key of opts.filter((k) => k.startsWith('init.')))
		assert.match(init, new RegExp(`config_list_foreach init ${key.slice(5)} `), `${key} is read by the init script`);
	ok('no option that no backend reads (daemon --check-config accepts them all)');

	/* The page's checks agree with the daemon's. */
	const verdict = (k, v) => page.evaluate(([ k, v ]) => window.__harness.options[k].validateValue('main', v) === true, [ k, v ]);
	const selectors = [ '0.0.0.0/0', '::/0', '192.168.1.0/24', '192.168.1.1/24', '10.0.0.0/33', 'fd00::/64', 'fd00::1/64',
		'2001:db8::/32', '2001:db8:::/32', '1.2.3.4/32', '1.2.3/24', 'iface:br-lan', 'iface:wg*', 'iface:', 'iface:a*b',
		'iface:abcdefghijklmnop', 'iface:abcdefghijklmno', 'default-route', 'primary', 'localhost', 'lan', 'fd00::/8 ' ];
	for (const s of selectors) {
		const daemonSays = checkConfig(`nodeport_addresses = [${JSON.stringify(s)}]\n`);
		assert.equal(await verdict('main.nodeport_addresses', s), daemonSays, `nodeport_addresses ${JSON.stringify(s)}: daemon says ${daemonSays}`);
	}
	for (const s of [ '30000-32767', '1-65535', '0-10', '100-50', '8080', 'abc', '30000-70000', ' 30000 - 32767 ' ]) {
		const daemonSays = checkConfig(`service_node_port_range = ${JSON.stringify(s)}\n`);
		assert.equal(await verdict('main.service_node_port_range', s), daemonSays, `service_node_port_range ${JSON.stringify(s)}`);
	}
	for (const s of [ '10.96.0.0/16', '10.96.0.1/16', 'fd00:96::/112', 'nope', '10.0.0.0/40' ]) {
		if (!(await verdict('main.service_cluster_ip_ranges', s)))
			assert.equal(checkConfig(`service_cluster_ip_ranges = [${JSON.stringify(s)}]\n`), false, `the page refuses ${s}, so must the daemon`);
	}
	ok('the page\'s checks of selectors and ranges give the daemon\'s verdicts');

	await open(page, port, 'nodeportd/settings', 'read');
	assert.ok((await page.$$('input:not([disabled])')).length === 0, 'read-only: the form is read-only');
	ok('settings read-only for a read-only session');
}

/* The daemon stops: the page says so at the next poll, and shows the state again when
 * it is back (here: the table it last showed stays, under the message). */
async function daemonGone(page, port, p) {
	await open(page, port, 'nodeportd/status', 'write');
	assert.equal(await page.textContent('#nodeportd-error'), '');
	const exited = new Promise((resolve) => p.once('exit', resolve));
	p.kill('SIGTERM');
	await exited;
	await page.evaluate(() => window.__harness.poll());
	const msg = await page.textContent('#nodeportd-error');
	assert.match(msg, /^nodeportd did not answer: .*Object not found/, msg);
	assert.ok((await rows(page, 'nodeportd-services')).some((r) => r[1] === 'web'), 'the last table stays');
	await page.screenshot({ path: path.join(shots, 'status-daemon-gone.png'), fullPage: true });
	ok('a stopped daemon: the page says nodeportd did not answer');
}

function writeTmp(name, text) {
	const f = path.join(tmp, name);
	fs.writeFileSync(f, text);
	return f;
}

async function main() {
	if (!fs.existsSync(bin))
		throw new Error(`no ${bin}: build it (cargo build) or set NODEPORTD_BIN`);
	const daemonProcess = await startDaemon();
	await seed();
	const port = await serve();
	const browser = await chromium.launch({
		executablePath: chromiumPath,
		args: [ '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
			'--disable-component-update', '--disable-sync' ]
	});
	cleanups.push(() => browser.close());
	const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
	await statusPage(page, port);
	await actions(page);
	await readOnly(page, port);
	await settingsPage(page, port);
	await daemonGone(page, port, daemonProcess);
	console.log(`${passed} checks passed; screenshots in ${shots}`);
}

main().then(() => 0, (e) => {
	console.error('FAIL: ' + (e && e.stack || e));
	const log = path.join(tmp, 'daemon.log');
	if (fs.existsSync(log))
		console.error('--- daemon log\n' + fs.readFileSync(log, 'utf8').slice(-4000));
	return 1;
}).then(async (code) => {
	for (const c of cleanups.reverse()) {
		try { await c(); } catch (e) { /* cleaning up */ }
	}
	fs.rmSync(tmp, { recursive: true, force: true });
	process.exit(code);
});
