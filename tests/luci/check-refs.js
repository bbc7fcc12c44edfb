#!/usr/bin/env node
/*
 * The menu, the ACL, the views and the ubus object refer to each other:
 * - every menu entry's view exists and every view has a menu entry; the top entry
 *   depends on the app's ACL and on /etc/config/nodeportd, which the nodeportd package ships;
 * - the ACL grants exactly the ubus calls the views declare (no more, no less), the
 *   nodeportd methods that change state only under "write", and the UCI config the views use;
 * - every nodeportd method the views call exists on the ubus object, and the parameters
 *   they pass are in its signature. The object's methods come from the daemon's native
 *   object (src/ubus/object.rs) and, while it ships, the rpcd plugin (`nodeportd.rpcd list`).
 */
'use strict';

const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '../..');
const app = path.join(root, 'openwrt-package/luci-app-nodeportd');
const viewDir = path.join(app, 'htdocs/luci-static/resources/view');
const menu = JSON.parse(fs.readFileSync(path.join(app, 'root/usr/share/luci/menu.d/luci-app-nodeportd.json'), 'utf8'));
const aclAll = JSON.parse(fs.readFileSync(path.join(app, 'root/usr/share/rpcd/acl.d/luci-app-nodeportd.json'), 'utf8'));
const pluginFile = path.join(root, 'openwrt-package/nodeportd/files/nodeportd.rpcd');
const objectFile = path.join(root, 'src/ubus/object.rs');
/* Methods of luci-base's own `luci` object, which the settings page uses. */
const LUCI_BASE = { luci: [ 'getLEDs', 'setInitAction' ] };

let checks = 0;
function ok(name) {
	checks++;
	console.log('ok - ' + name);
}

/* Menu. */
const views = [];
(function walk(dir, rel) {
	for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
		if (e.isDirectory())
			walk(path.join(dir, e.name), rel + e.name + '/');
		else if (e.name.endsWith('.js'))
			views.push(rel + e.name.slice(0, -3));
	}
})(viewDir, '');

const top = menu['admin/services/nodeportd'];
assert.ok(top, 'menu: admin/services/nodeportd');
assert.deepEqual(top.action, { type: 'firstchild' });
assert.deepEqual(top.depends.acl, [ 'luci-app-nodeportd' ]);
assert.deepEqual(top.depends.uci, { nodeportd: true });
assert.ok(aclAll[top.depends.acl[0]], 'the ACL the menu depends on exists');
assert.ok(fs.existsSync(path.join(root, 'openwrt-package/nodeportd/files/nodeportd.config')), 'the nodeportd package ships /etc/config/nodeportd');
assert.match(fs.readFileSync(path.join(root, 'openwrt-package/nodeportd/Makefile'), 'utf8'), /\$\(1\)\/etc\/config\/nodeportd/);
const menuViews = [];
for (const [ key, node ] of Object.entries(menu)) {
	assert.ok(key.startsWith('admin/services/nodeportd'), key);
	if (node.action.type === 'view') {
		assert.ok(views.includes(node.action.path), `menu ${key}: view ${node.action.path}.js exists`);
		menuViews.push(node.action.path);
	}
}
assert.deepEqual(menuViews.slice().sort(), views.slice().sort(), 'every view has a menu entry');
ok(`menu: ${menuViews.join(', ')} under admin/services/nodeportd, depending on the ACL and /etc/config/nodeportd`);

/* What the views declare. */
const declared = [];
const uciConfigs = new Set();
for (const v of views) {
	const src = fs.readFileSync(path.join(viewDir, v + '.js'), 'utf8');
	for (const m of src.matchAll(/rpc\.declare\(\{([\s\S]*?)\}\);/g)) {
		const body = m[1];
		const object = (body.match(/object:\s*'([^']+)'/) || [])[1];
		const method = (body.match(/method:\s*'([^']+)'/) || [])[1];
		const params = ((body.match(/params:\s*\[([^\]]*)\]/) || [])[1] || '').match(/'[^']+'/g) || [];
		assert.ok(object && method, `${v}: rpc.declare with object and method`);
		declared.push({ view: v, object, method, params: params.map((p) => p.slice(1, -1)) });
	}
	for (const m of src.matchAll(/(?:form\.Map|uci\.load)\('([^']+)'/g))
		uciConfigs.add(m[1]);
}
assert.ok(declared.length > 0);

/* The ACL. */
const acl = aclAll['luci-app-nodeportd'];
const grants = (part) => Object.entries((acl[part] || {}).ubus || {}).flatMap(([ o, ms ]) => ms.map((m) => `${o}.${m}`));
const read = grants('read'), write = grants('write');
const wanted = new Set(declared.map((d) => `${d.object}.${d.method}`));
assert.deepEqual([ ...new Set(read.concat(write)) ].sort(), [ ...wanted ].sort(), 'the ACL grants exactly the calls the views declare');
for (const g of read)
	assert.doesNotMatch(g, /^nodeportd\..*_(apply|delete)$/, `${g} changes state: it belongs under write`);
for (const g of write)
	assert.match(g, /^nodeportd\..*_(apply|delete)$|^luci\.setInitAction$/, `${g} is read-only: it belongs under read`);
for (const c of uciConfigs) {
	assert.ok((acl.read.uci || []).includes(c), `ACL read uci ${c}`);
	assert.ok((acl.write.uci || []).includes(c), `ACL write uci ${c}`);
}
ok(`ACL: read ${read.join(' ')}; write ${write.join(' ')}; uci ${[ ...uciConfigs ].join(' ')}`);

/* The ubus object. */
const sources = [];
if (fs.existsSync(objectFile)) {
	const src = fs.readFileSync(objectFile, 'utf8');
	const consts = {};
	for (const m of src.matchAll(/const (\w+): &\[\(&str, u8\)\] = &\[([^\]]*)\];/g))
		consts[m[1]] = [ ...m[2].matchAll(/\("(\w+)"/g) ].map((x) => x[1]);
	const methods = {};
	for (const m of src.matchAll(/Spec \{ ubus: "(\w+)", rpc: "[\w.]+", args: (&\[[^\]]*\]|\w+) \}/g))
		methods[m[1]] = m[2].startsWith('&[') ? [ ...m[2].matchAll(/\("(\w+)"/g) ].map((x) => x[1]) : consts[m[2]];
	assert.ok(Object.keys(methods).length > 0, `methods found in ${objectFile}`);
	sources.push([ 'src/ubus/object.rs', methods ]);
}
if (fs.existsSync(pluginFile)) {
	const r = spawnSync('sh', [ pluginFile, 'list' ], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
	const methods = {};
	for (const [ m, args ] of Object.entries(JSON.parse(r.stdout)))
		methods[m] = Object.keys(args);
	sources.push([ 'nodeportd.rpcd list', methods ]);
}
assert.ok(sources.length > 0, 'the ubus object\'s methods: neither src/ubus/object.rs nor the rpcd plugin is there');
for (const [ name, methods ] of sources) {
	for (const d of declared.filter((d) => d.object === 'nodeportd')) {
		assert.ok(methods[d.method], `${d.view}: nodeportd.${d.method} is a method of the object (${name})`);
		for (const p of d.params)
			assert.ok(methods[d.method].includes(p), `${d.view}: nodeportd.${d.method} takes ${p} (${name}: ${methods[d.method].join(', ')})`);
	}
	ok(`ubus object (${name}): the views' nodeportd calls and their parameters exist`);
}
for (const d of declared.filter((d) => d.object !== 'nodeportd'))
	assert.ok((LUCI_BASE[d.object] || []).includes(d.method), `${d.view}: ${d.object}.${d.method} is not a known luci-base method`);
ok('the other calls are luci-base\'s: ' + declared.filter((d) => d.object !== 'nodeportd').map((d) => `${d.object}.${d.method}`).join(', '));

console.log(`${checks} checks passed`);
