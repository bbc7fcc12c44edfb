'use strict';
'require view';
'require form';
'require rpc';
'require uci';
'require ui';

/*
 * nodeportd settings: the options of /etc/config/nodeportd that the daemon (section
 * `main`) and its init script (section `init`) read, nothing else. Saving commits the
 * config; procd's reload trigger for `nodeportd` then runs the init script's reload,
 * which sends the daemon SIGHUP and it re-reads the file. socket_group cannot change
 * while the daemon runs, so a change to it restarts the service instead.
 */

const callLeds = rpc.declare({
	object: 'luci',
	method: 'getLEDs',
	expect: { '': {} }
});

const callInitAction = rpc.declare({
	object: 'luci',
	method: 'setInitAction',
	params: [ 'name', 'action' ],
	expect: { result: false }
});

/* The daemon's check of a nodeport_addresses entry (config::AddrSelector::parse), so
 * that a typo is refused here instead of in the log after the reload. */
function parseIPv4(s) {
	const parts = s.split('.');
	if (parts.length !== 4)
		return null;
	const bytes = parts.map(function(p) { return /^\d{1,3}$/.test(p) ? Number(p) : 256; });
	return bytes.every(function(b) { return b < 256; }) ? bytes : null;
}

function parseIPv6(s) {
	const halves = s.split('::');
	if (halves.length > 2)
		return null;
	const groups = function(part) { return part === '' ? [] : part.split(':'); };
	const head = groups(halves[0]), tail = halves.length === 2 ? groups(halves[1]) : [];
	if (halves.length === 1 ? head.length !== 8 : head.length + tail.length > 7)
		return null;
	const all = head.concat(new Array(8 - head.length - tail.length).fill('0'), tail);
	if (!all.every(function(g) { return /^[0-9a-fA-F]{1,4}$/.test(g); }))
		return null;
	const bytes = [];
	all.forEach(function(g) { const n = parseInt(g, 16); bytes.push(n >> 8, n & 255); });
	return bytes;
}

/* A CIDR with no host bits set: null if fine, else why not. */
function checkCidr(s) {
	const m = s.match(/^([^/]+)\/(\d{1,3})$/);
	const bytes = m ? (m[1].indexOf(':') >= 0 ? parseIPv6(m[1]) : parseIPv4(m[1])) : null;
	if (!bytes || Number(m[2]) > bytes.length * 8)
		return _('not a CIDR nor one of "default-route", "primary", "localhost", "iface:NAME"');
	const len = Number(m[2]);
	for (let bit = len; bit < bytes.length * 8; bit++)
		if (bytes[bit >> 3] & (0x80 >> (bit & 7)))
			return _('%s has host bits set').format(s);
	return null;
}

function checkSelector(value) {
	const t = String(value == null ? '' : value).trim();
	if (t === '')
		return _('an empty entry is not allowed');
	if (t === 'default-route' || t === 'primary' || t === 'localhost')
		return null;
	if (t.indexOf('iface:') === 0) {
		const name = t.substr(6);
		const stem = name.replace(/\*$/, '');
		if (name === '' || stem.length > 15 || /[*/ :]/.test(stem))
			return _('bad interface name "%s" (at most 15 characters, an optional trailing *)').format(name);
		return null;
	}
	return checkCidr(t);
}

function checkPortRange(value) {
	const m = String(value).trim().match(/^(\d{1,5})(?:\s*-\s*(\d{1,5}))?$/);
	const first = m ? Number(m[1]) : 0, last = m ? Number(m[2] || m[1]) : 0;
	if (!m || first < 1 || first > last || last > 65535)
		return _('expected FIRST-LAST with 1 <= FIRST <= LAST <= 65535');
	return null;
}

function validator(check) {
	return function(section_id, value) {
		if (value == null || value === '')
			return true;
		const why = check(value);
		return why ? why : true;
	};
}

return view.extend({
	load: function() {
		return Promise.all([
			L.resolveDefault(callLeds(), {}),
			uci.load('nodeportd')
		]);
	},

	render: function(data) {
		const leds = Object.keys(data[0] || {}).sort();
		let s, o;

		this.socketGroup = uci.get('nodeportd', 'main', 'socket_group') || '';

		const m = new form.Map('nodeportd', _('nodeportd'),
			_('Where this router answers as a Kubernetes node, and the ranges nodeportd allocates from. Saving reloads nodeportd: it re-reads the configuration and keeps its Services and rules.'));

		s = m.section(form.NamedSection, 'main', 'nodeportd', _('Daemon'));
		s.addremove = false;
		s.tab('general', _('General'));
		s.tab('ranges', _('Ranges'));
		s.tab('system', _('System'));

		o = s.taboption('general', form.Value, 'node_name', _('Node name'),
			_('The name this node has for Kubernetes (EndpointSlices name it in nodeName). Empty: the hostname.'));
		o.datatype = 'hostname';
		o.placeholder = 'edge-1';

		o = s.taboption('general', form.DynamicList, 'nodeport_addresses', _('NodePort addresses'),
			_('Where NodePorts answer. Each entry selects local addresses: a CIDR (<code>192.168.1.0/24</code>, <code>::/0</code>), <code>iface:NAME</code> for the addresses of a network device (<code>iface:br-lan</code>; a trailing <code>*</code> matches a prefix, <code>iface:wg*</code>), <code>default-route</code> for the device that holds the default route, <code>primary</code> for the node IP, or <code>localhost</code>. Empty: every local address but loopback, the WAN\'s included; with entries, the WAN answers only if one selects it.'));
		o.placeholder = 'iface:br-lan';
		o.validate = validator(checkSelector);

		o = s.taboption('general', form.DynamicList, 'node_ip', _('Node IP'),
			_('The node\'s primary address, at most one per family; the <code>primary</code> selector picks it. Empty: the first address of the default-route device.'));
		o.datatype = 'ipaddr("nomask")';
		o.placeholder = '192.168.1.1';

		o = s.taboption('ranges', form.Value, 'service_node_port_range', _('NodePort range'),
			_('FIRST-LAST. If Services hold ports outside a new range, nodeportd keeps the old range and says why in the system log.'));
		o.placeholder = '30000-32767';
		o.validate = validator(checkPortRange);

		o = s.taboption('ranges', form.DynamicList, 'service_cluster_ip_ranges', _('ClusterIP ranges'),
			_('At most one IPv4 and one IPv6 CIDR (at most a /64) that ClusterIPs come from.'));
		o.placeholder = '10.96.0.0/16';
		o.validate = validator(checkCidr);

		o = s.taboption('system', form.Value, 'socket_group', _('Socket group'),
			_('A group whose members may use the control socket besides root (nodeportctl). Changing it restarts nodeportd.'));
		o.placeholder = 'nodeport';
		o.validate = function(section_id, value) {
			/* A name from /etc/group (letters, digits, '.', '_' and '-'). */
			return (!value || /^[A-Za-z_][A-Za-z0-9._-]*$/.test(value)) ? true : _('a group name from /etc/group');
		};

		o = s.taboption('system', form.Value, 'status_led', _('Status LED'),
			_('An LED under /sys/class/leds: on while in sync, blinking while not, off when stopped.'));
		o.placeholder = _('none');
		leds.forEach(function(name) { o.value(name); });
		o.validate = function(section_id, value) {
			return (value && (value.indexOf('/') >= 0 || value === '.' || value === '..'))
				? _('an LED name under /sys/class/leds') : true;
		};

		o = s.taboption('system', form.ListValue, 'log_level', _('Log level'));
		o.value('', _('default (info)'));
		[ 'error', 'warn', 'info', 'debug', 'trace', 'off' ].forEach(function(l) { o.value(l); });

		s = m.section(form.NamedSection, 'init', 'init', _('Reloads'));
		s.addremove = false;

		o = s.option(form.DynamicList, 'reload_interface', _('Reload on interface events'),
			_('Logical interfaces (Network → Interfaces) whose ifup, ifdown and updates make nodeportd look at its addresses again.'));
		o.datatype = 'uciname';
		o.placeholder = 'wan';

		return m.render();
	},

	/* socket_group is fixed while the daemon runs (its reload would refuse the whole new
	 * config): once LuCI has applied a change to it, restart the service. */
	handleSaveApply: function(ev, mode) {
		const before = this.socketGroup;
		return this.handleSave(ev).then(L.bind(function() {
			const after = uci.get('nodeportd', 'main', 'socket_group') || '';
			if (after !== before) {
				const restart = function() {
					document.removeEventListener('uci-applied', restart);
					return callInitAction('nodeportd', 'restart');
				};
				document.addEventListener('uci-applied', restart);
			}
			ui.changes.apply(String(mode) === '0');
		}, this));
	}
});
