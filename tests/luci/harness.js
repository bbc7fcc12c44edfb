/*
 * A TEST HARNESS, NOT LuCI.
 *
 * This page provides the few LuCI client calls that the luci-app-nodeportd views use
 * (E, _, String.format, L.bind/resolveDefault/hasViewPermission, dom, poll, rpc, ui,
 * uci, view, form), written for this test from LuCI's documented behaviour, so that the
 * views can be loaded in a real browser without LuCI. What matters for the test is kept
 * faithful: a lone string child of E() becomes innerHTML and strings in arrays become
 * text nodes (as in LuCI's dom.append), rpc.declare posts uhttpd's JSON-RPC `call` to
 * /ubus with a session, and `expect` unwraps the reply as LuCI's rpc.js does. The real
 * LuCI is checked by hand (docs/openwrt.md, section LuCI).
 *
 * URL: harness.html?view=nodeportd/status&acl=write|read[&sid=RPCD_SESSION]
 */
'use strict';

(function() {
	const params = new URLSearchParams(location.search);
	const readonly = params.get('acl') === 'read';
	/* The test's stand-in server knows two sessions; `sid` passes a real rpcd session
	 * instead (by hand, against real uhttpd + rpcd: docs/openwrt.md). */
	const session = params.get('sid') || (readonly ? 'session-read' : 'session-write');
	const h = window.__harness = { errors: [], notifications: [], strings: new Set(), polls: [], options: {} };

	window.addEventListener('error', function(ev) { h.errors.push(String(ev.message)); });
	window.addEventListener('unhandledrejection', function(ev) { h.errors.push('unhandled rejection: ' + (ev.reason && ev.reason.stack || ev.reason)); });

	/* LuCI's String.format: %s %d %f (with precision), %t (seconds as a duration), %h (HTML-escaped). */
	String.prototype.format = function() {
		const args = arguments;
		let i = 0;
		return this.replace(/%(\.\d+)?([sdfth%])/g, function(m, prec, conv) {
			if (conv === '%')
				return '%';
			const a = args[i++];
			switch (conv) {
			case 'd': return String(Math.trunc(Number(a)));
			case 'f': return Number(a).toFixed(prec ? Number(prec.substr(1)) : 6);
			case 't': {
				const s = Number(a), d = Math.floor(s / 86400), hh = Math.floor(s / 3600) % 24, mm = Math.floor(s / 60) % 60;
				return (d ? d + 'd ' : '') + (d || hh ? hh + 'h ' : '') + mm + 'm ' + (s % 60) + 's';
			}
			case 'h': return String(a).replace(/[&<>"']/g, function(c) { return '&#' + c.charCodeAt(0) + ';'; });
			default: return String(a);
			}
		});
	};

	window._ = function(s) { h.strings.add(s); return s; };

	function isElem(n) { return n != null && typeof n === 'object' && 'nodeType' in n; }

	const dom = {
		elem: isElem,
		append: function(node, children) {
			if (Array.isArray(children)) {
				children.forEach(function(c) {
					if (isElem(c))
						node.appendChild(c);
					else if (c != null)
						node.appendChild(document.createTextNode(String(c)));
				});
			}
			else if (isElem(children))
				node.appendChild(children);
			else if (children != null)
				node.innerHTML = String(children);
			return node;
		},
		content: function(node, children) {
			while (node.firstChild)
				node.removeChild(node.firstChild);
			return dom.append(node, children);
		},
		parent: function(node, selector) { return node.closest(selector); }
	};

	window.E = function(tag, attrs, children) {
		const node = document.createElement(tag);
		if (attrs != null && typeof attrs === 'object' && !Array.isArray(attrs) && !isElem(attrs)) {
			Object.keys(attrs).forEach(function(k) {
				const v = attrs[k];
				if (typeof v === 'function')
					node.addEventListener(k, v);
				else if (v != null)
					node.setAttribute(k, typeof v === 'object' ? JSON.stringify(v) : v);
			});
		}
		else {
			children = attrs;
		}
		return dom.append(node, children);
	};

	let rpcId = 0;
	const rpc = {
		declare: function(d) {
			return function() {
				const args = {};
				const list = arguments;
				(d.params || []).forEach(function(p, i) { if (list[i] !== undefined) args[p] = list[i]; });
				return fetch('/ubus', {
					method: 'POST',
					headers: { 'Content-Type': 'application/json' },
					body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method: 'call', params: [ session, d.object, d.method, args ] })
				}).then(function(r) { return r.json(); }).then(function(msg) {
					if (msg.error) {
						const e = new Error(msg.error.code === -32002 ? 'Access denied'
							: 'RPC call to %s/%s failed with error %d: %s'.format(d.object, d.method, msg.error.code, msg.error.message));
						e.name = 'RPCError';
						e.code = msg.error.code;
						throw e;
					}
					let ret = msg.result.length > 1 ? msg.result[1] : msg.result[0];
					if (d.expect) {
						for (const key in d.expect) {
							if (key !== '' && ret != null && typeof ret === 'object')
								ret = ret[key];
							if (ret == null || Object.prototype.toString.call(ret) !== Object.prototype.toString.call(d.expect[key]))
								ret = d.expect[key];
							break;
						}
					}
					return ret;
				});
			};
		}
	};

	const poll = {
		add: function(fn, interval) { h.polls.push({ fn: fn, interval: interval }); }
	};
	/* The test runs the poll functions when it wants a refresh, instead of a timer. */
	h.poll = function() { return Promise.all(h.polls.map(function(p) { return p.fn(); })); };

	const ui = {
		showModal: function(title, children) {
			const m = E('div', { 'id': 'modal', 'class': 'modal' }, [ E('h4', {}, [ title ]), E('div', {}, children) ]);
			document.body.appendChild(m);
			return m;
		},
		hideModal: function() {
			const m = document.getElementById('modal');
			if (m)
				m.remove();
		},
		addNotification: function(title, children, cls) {
			const n = E('div', { 'class': 'alert-message notification ' + (cls || '') }, [ title ? E('h4', {}, [ title ]) : '', E('div', {}, children) ]);
			h.notifications.push(n);
			document.getElementById('notifications').appendChild(n);
			return n;
		},
		createHandlerFn: function(ctx, fn) {
			const bound = Array.prototype.slice.call(arguments, 2);
			return function(ev) {
				const f = typeof fn === 'string' ? ctx[fn] : fn;
				const btn = ev.currentTarget;
				btn.disabled = true;
				return Promise.resolve(f.apply(ctx, bound.concat([ ev ]))).finally(function() { btn.disabled = false; });
			};
		},
		changes: { apply: function() { h.applied = true; } }
	};

	const callUciGet = rpc.declare({ object: 'uci', method: 'get', params: [ 'config' ], expect: { values: {} } });
	const uci = {
		data: {},
		load: function(pkg) {
			return callUciGet(pkg).then(function(values) { uci.data[pkg] = values; return pkg; });
		},
		get: function(pkg, sid, opt) {
			const s = (uci.data[pkg] || {})[sid];
			return s == null ? null : (opt == null ? s : s[opt]);
		}
	};

	/* form: enough of form.Map to render the options with their UCI values and validators. */
	class AbstractValue {
		constructor(section, option, title, description) {
			Object.assign(this, { section: section, option: option, title: title, description: description, values: [] });
		}
		value(key, label) { this.values.push([ key, label || key ]); }
		depends() {}
		validateValue(sid, v) {
			return this.validate ? this.validate(sid, v) : true;
		}
		render(sid) {
			const readonly = this.section.map.readonly;
			const cur = uci.get(this.section.map.config, sid, this.option);
			const list = cur == null ? [] : (Array.isArray(cur) ? cur : [ cur ]);
			const inputs = (this instanceof DynamicList ? list.concat([ '' ]) : [ list[0] == null ? '' : list[0] ]).map(L.bind(function(v) {
				const why = v === '' ? true : this.validateValue(sid, v);
				return E(this instanceof ListValue ? 'select' : 'input', {
					'class': 'cbi-input' + (why === true ? '' : ' cbi-input-invalid'),
					'value': v,
					'placeholder': this.placeholder || null,
					'data-error': why === true ? null : why,
					'disabled': readonly ? '' : null
				}, this instanceof ListValue ? this.values.map(function(kv) {
					return E('option', { 'value': kv[0], 'selected': kv[0] === v ? '' : null }, [ kv[1] ]);
				}) : null);
			}, this));
			return E('div', { 'class': 'cbi-value', 'data-option': this.option, 'data-widget': this.constructor.name }, [
				E('label', { 'class': 'cbi-value-title' }, [ this.title ]),
				E('div', { 'class': 'cbi-value-field' }, inputs.concat([
					this.description ? E('div', { 'class': 'cbi-value-description' }, this.description) : ''
				]))
			]);
		}
	}
	class Value extends AbstractValue {}
	class DynamicList extends AbstractValue {}
	class ListValue extends AbstractValue {}
	class Flag extends AbstractValue {}

	class NamedSection {
		constructor(map, sid, type, title) {
			Object.assign(this, { map: map, sid: sid, type: type, title: title, children: [], tabs: [] });
		}
		tab(name, title) { this.tabs.push([ name, title ]); }
		option(cls, name, title, description) {
			const o = new cls(this, name, title, description);
			this.children.push(o);
			h.options[this.sid + '.' + name] = o;
			return o;
		}
		taboption(tab, cls, name, title, description) {
			const o = this.option(cls, name, title, description);
			o.tab = tab;
			return o;
		}
		render() {
			return E('div', { 'class': 'cbi-section', 'data-section': this.sid, 'data-type': this.type }, [
				E('h3', {}, [ this.title ])
			].concat(this.children.map(L.bind(function(o) { return o.render(this.sid); }, this))));
		}
	}

	class Map {
		constructor(config, title, description) {
			Object.assign(this, { config: config, title: title, description: description, sections: [] });
			this.readonly = !L.hasViewPermission();
		}
		section(cls) {
			const args = Array.prototype.slice.call(arguments, 1);
			const s = new cls(this, ...args);
			this.sections.push(s);
			return s;
		}
		render() {
			return uci.load(this.config).then(L.bind(function() {
				return E('div', { 'class': 'cbi-map', 'data-config': this.config }, [
					E('h2', {}, [ this.title ]),
					E('div', { 'class': 'cbi-map-descr' }, this.description)
				].concat(this.sections.map(function(s) { return s.render(); })));
			}, this));
		}
		save() { return Promise.resolve(); }
	}

	const form = { Map: Map, NamedSection: NamedSection, Value: Value, DynamicList: DynamicList, ListValue: ListValue, Flag: Flag };

	const view = {
		extend: function(proto) {
			return Object.assign({
				handleSave: function() { return Promise.resolve(); },
				handleSaveApply: function() { return Promise.resolve(); },
				handleReset: function() { return Promise.resolve(); }
			}, proto);
		}
	};

	window.L = {
		env: {},
		bind: function(fn, ctx) {
			const bound = Array.prototype.slice.call(arguments, 2);
			return function() { return fn.apply(ctx, bound.concat(Array.prototype.slice.call(arguments))); };
		},
		resolveDefault: function(p, d) { return Promise.resolve(p).catch(function() { return d; }); },
		hasViewPermission: function() { return !readonly; },
		require: function(name) { return Promise.resolve(modules[name]); }
	};

	const modules = { view: view, dom: dom, poll: poll, rpc: rpc, ui: ui, uci: uci, form: form };

	/* LuCI's loader: the `'require NAME [as ALIAS]'` lines name the module arguments of the
	 * view's function body. */
	const name = params.get('view');
	fetch('/view/' + name + '.js').then(function(r) { return r.text(); }).then(function(src) {
		const req = [];
		src.replace(/^\s*'require ([\w.]+)(?: as (\w+))?';/mg, function(m, mod, alias) {
			req.push([ alias || mod, mod ]);
			return m;
		});
		const fn = new Function(req.map(function(r) { return r[0]; }).join(','), src + '\n//# sourceURL=' + name + '.js');
		const v = fn.apply(window, req.map(function(r) {
			if (!(r[1] in modules))
				throw new Error('the harness does not provide ' + r[1]);
			return modules[r[1]];
		}));
		h.view = v;
		return Promise.resolve(v.load()).then(function(data) { return v.render(data); });
	}).then(function(node) {
		document.getElementById('view').appendChild(node);
		h.ready = true;
	}).catch(function(e) {
		h.errors.push(String(e && e.stack || e));
		h.ready = true;
	});
})();
