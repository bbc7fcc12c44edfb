'use strict';
'require view';
'require dom';
'require poll';
'require rpc';
'require ui';

/*
 * nodeportd status: what the router serves, where, and whether the kernel holds it.
 * Everything comes from the daemon's own ubus object `nodeportd`; the page polls it.
 * A refused request answers (ubus status 0) with {error: {code, reason, message}};
 * the message is shown as the daemon worded it. The calls have no `expect`: with one,
 * LuCI would turn a non-zero ubus status into an empty object and hide it.
 */

const callStatus = rpc.declare({
	object: 'nodeportd',
	method: 'status'
});

const callServiceList = rpc.declare({
	object: 'nodeportd',
	method: 'service_list'
});

const callEndpointsList = rpc.declare({
	object: 'nodeportd',
	method: 'endpoints_list'
});

const callServiceApply = rpc.declare({
	object: 'nodeportd',
	method: 'service_apply',
	params: [ 'object' ]
});

const callEndpointsApply = rpc.declare({
	object: 'nodeportd',
	method: 'endpoints_apply',
	params: [ 'object' ]
});

const callServiceDelete = rpc.declare({
	object: 'nodeportd',
	method: 'service_delete',
	params: [ 'namespace', 'name' ]
});

const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

function isObj(v) {
	return v != null && typeof v === 'object' && !Array.isArray(v);
}

function list(v) {
	return Array.isArray(v) ? v : [];
}

/* Text from the daemon as a child of E(): LuCI sets a lone string child as innerHTML, so
 * a string goes in an array, which becomes a text node. */
function plain(v) {
	return (v != null && typeof v === 'object' && 'nodeType' in v) ? v : [ String(v) ];
}

/* The message of a refused request, or null. */
function errorOf(reply) {
	if (typeof reply === 'number')
		return _('ubus status %d').format(reply);
	if (!isObj(reply))
		return _('No reply from nodeportd');
	if (isObj(reply.error))
		return String(reply.error.message || JSON.stringify(reply.error));
	return null;
}

/* `80:30086/TCP`, as kubectl prints PORT(S). */
function formatPorts(spec) {
	return list(spec.ports).map(function(p) {
		const proto = p.protocol || 'TCP';
		return p.nodePort ? '%d:%d/%s'.format(p.port, p.nodePort, proto) : '%d/%s'.format(p.port, proto);
	}).join(', ');
}

/* {ready, total} for one Service: its EndpointSlices if it has any, else its Endpoints. */
function endpointCounts(svc, endpoints) {
	const ns = svc.metadata.namespace || 'default';
	const name = svc.metadata.name;
	const slices = endpoints.filter(function(o) {
		return o.kind === 'EndpointSlice' && (o.metadata.namespace || 'default') === ns &&
			isObj(o.metadata.labels) && o.metadata.labels[SERVICE_NAME_LABEL] === name;
	});
	let ready = 0, total = 0;

	if (slices.length) {
		slices.forEach(function(s) {
			list(s.endpoints).forEach(function(ep) {
				total++;
				/* Kubernetes reads a missing `ready` as ready. */
				if (!isObj(ep.conditions) || ep.conditions.ready !== false)
					ready++;
			});
		});
		return { ready: ready, total: total };
	}

	endpoints.forEach(function(o) {
		if (o.kind !== 'Endpoints' || (o.metadata.namespace || 'default') !== ns || o.metadata.name !== name)
			return;
		list(o.subsets).forEach(function(ss) {
			ready += list(ss.addresses).length;
			total += list(ss.addresses).length + list(ss.notReadyAddresses).length;
		});
	});
	return { ready: ready, total: total };
}

function table(id, titles, rows, empty) {
	const t = E('table', { 'class': 'table', 'id': id }, [
		E('tr', { 'class': 'tr table-titles' }, titles.map(function(title) {
			return E('th', { 'class': 'th' }, title);
		}))
	]);

	if (!rows.length)
		t.appendChild(E('tr', { 'class': 'tr placeholder' }, E('td', { 'class': 'td', 'colspan': titles.length }, E('em', empty))));

	rows.forEach(function(row) {
		t.appendChild(E('tr', { 'class': 'tr' }, row.map(function(cell, i) {
			return E('td', { 'class': 'td', 'data-title': titles[i] }, plain(cell));
		})));
	});
	return t;
}

/* One band of an allocator, {first, last, used, free}, as a bar. */
function bandBar(label, band) {
	if (!isObj(band))
		return E('div', { 'class': 'nodeportd-band' }, [ E('strong', label), ' ', _('not reported') ]);

	const used = Number(band.used) || 0;
	const size = used + (Number(band.free) || 0);
	const pct = size > 0 ? Math.min(100, used * 100 / size) : 0;
	const text = _('%d of %d used (%s – %s)').format(used, size, String(band.first), String(band.last));

	return E('div', { 'class': 'nodeportd-band', 'data-used': used, 'data-size': size }, [
		E('div', { 'style': 'margin:.3em 0 .1em' }, [ E('strong', label), ' ', text ]),
		E('div', { 'class': 'cbi-progressbar', 'title': '%d / %d (%.1f%%)'.format(used, size, pct) },
			E('div', { 'style': 'width:%.2f%%'.format(pct) }))
	]);
}

return view.extend({
	/* The lists are asked for again only when the daemon changed something: it writes
	 * every accepted change to its store (store.writes) and resyncs the data plane
	 * (dataplane.generation). So a poll of an idle router is one small call. */
	lists: null,
	listsKey: null,

	fetch: function(force) {
		return callStatus().then(L.bind(function(st) {
			const key = (isObj(st) && isObj(st.store) && isObj(st.dataplane))
				? '%s/%s'.format(st.store.writes, st.dataplane.generation) : null;
			if (!force && key !== null && key === this.listsKey)
				return [ st ].concat(this.lists);
			return Promise.all([ callServiceList(), callEndpointsList() ]).then(L.bind(function(lists) {
				this.lists = lists;
				this.listsKey = key;
				return [ st ].concat(lists);
			}, this));
		}, this));
	},

	load: function() {
		return this.fetch().catch(function(err) {
			return [ { error: { message: err.message || String(err) } }, {}, {} ];
		});
	},

	renderDataplane: function(st) {
		const dp = isObj(st.dataplane) ? st.dataplane : {};
		const node = isObj(st.node) ? st.node : {};

		const inSync = dp.inSync === true;
		const rows = [
			[ _('State'), E('span', {
				'class': 'label ' + (inSync ? 'success' : 'warning'),
				'id': 'nodeportd-insync'
			}, inSync ? _('In sync') : _('Not in sync')) ],
			[ _('Last error'), dp.lastError ? E('code', { 'id': 'nodeportd-lasterror' }, plain(dp.lastError)) : _('none') ],
			[ _('Last sync'), dp.lastSyncMillis != null
				? _('generation %d, took %d ms').format(dp.generation, dp.lastSyncMillis)
				: _('generation %d, no sync yet').format(dp.generation || 0) ],
			[ _('Last sync at'), E('span', { 'id': 'nodeportd-lastsync' }, dp.lastSyncSecondsAgo != null
				? _('%s ago (%s)').format('%t'.format(dp.lastSyncSecondsAgo),
					new Date(Date.now() - dp.lastSyncSecondsAgo * 1000).toLocaleString())
				: _('never')) ],
			[ _('nftables table'), dp.table ? String(dp.table) + (dp.dryRun ? ' ' + _('(dry run: nothing is programmed)') : '') : '-' ],
			[ _('Node'), String(node.name || '-') ],
			[ _('Version'), String(st.version || '-') ],
			[ _('Uptime'), st.uptimeSeconds != null ? '%t'.format(st.uptimeSeconds) : '-' ]
		];

		return E('table', { 'class': 'table', 'id': 'nodeportd-dataplane' }, rows.map(function(r) {
			return E('tr', { 'class': 'tr' }, [
				E('td', { 'class': 'td left', 'width': '33%' }, r[0]),
				E('td', { 'class': 'td left' }, plain(r[1]))
			]);
		}));
	},

	renderAddresses: function(st) {
		const node = isObj(st.node) ? st.node : {};
		const rows = list(node.selectors).map(function(s) {
			return [ String(s.address), list(s.interfaces).join(', ') || '-', list(s.selectors).join(', ') ];
		});
		/* An older daemon reports the addresses only. */
		if (!rows.length)
			list(node.addresses).forEach(function(a) { rows.push([ String(a), '-', '-' ]); });

		const unmatched = list(node.unmatchedSelectors);

		return E('div', {}, [
			table('nodeportd-addresses', [ _('Address'), _('Interfaces'), _('Selected by') ], rows,
				_('NodePorts answer on no address: no selector matches a local address.')),
			E('div', { 'id': 'nodeportd-unmatched', 'style': 'margin-top:.5em' }, unmatched.length
				? unmatched.reduce(function(acc, u, i) {
					return acc.concat(i ? [ ', ' ] : [], [ E('code', {}, plain(u)) ]);
				}, [ E('strong', _('Selectors that match no address:')), ' ' ])
				: E('em', _('Every selector matches an address.')))
		]);
	},

	renderBands: function(st) {
		const np = isObj(st.nodePorts) ? st.nodePorts : {};
		const parts = [
			E('h4', {}, plain(_('NodePorts %s').format(String(np.range || '')))),
			bandBar(_('Static band (ports asked for by Services):'), np.static),
			bandBar(_('Dynamic band (ports nodeportd picks):'), np.dynamic)
		];

		list(st.serviceCIDRs).forEach(function(c) {
			parts.push(E('h4', {}, plain(_('ClusterIPs %s').format(String(c.cidr)))));
			parts.push(bandBar(_('Static band (addresses asked for by Services):'), c.static));
			parts.push(bandBar(_('Dynamic band (addresses nodeportd picks):'), c.dynamic));
		});

		return E('div', { 'id': 'nodeportd-bands' }, parts);
	},

	renderServices: function(services, endpoints) {
		const writable = L.hasViewPermission();
		const rows = services.map(L.bind(function(svc) {
			const spec = isObj(svc.spec) ? svc.spec : {};
			const ns = svc.metadata.namespace || 'default';
			const eps = endpointCounts(svc, endpoints);
			const ips = list(spec.clusterIPs).length ? list(spec.clusterIPs).join(', ') : (spec.clusterIP || '-');

			return [
				ns,
				svc.metadata.name,
				spec.type || 'ClusterIP',
				ips,
				formatPorts(spec) || '-',
				E('span', { 'class': eps.total && eps.ready === eps.total ? '' : 'nodeportd-degraded' }, '%d/%d'.format(eps.ready, eps.total)),
				spec.healthCheckNodePort ? String(spec.healthCheckNodePort) : '-',
				E('button', {
					'class': 'btn cbi-button cbi-button-remove',
					'title': _('Delete Service %s/%s').format(ns, svc.metadata.name),
					'disabled': writable ? null : '',
					'click': ui.createHandlerFn(this, 'handleDelete', ns, svc.metadata.name)
				}, _('Delete'))
			];
		}, this));

		return table('nodeportd-services',
			[ _('Namespace'), _('Name'), _('Type'), _('ClusterIP'), _('Ports'), _('Endpoints ready'), _('Health check port'), '' ],
			rows, _('No Services.'));
	},

	renderProblems: function(st) {
		const dp = isObj(st.dataplane) ? st.dataplane : {};
		const conflicts = list(dp.conflicts).concat(list(st.problems));
		const checks = list(st.healthChecks).map(function(h) {
			let state;
			if (h.error)
				state = E('span', { 'class': 'nodeportd-degraded' }, plain(_('not listening: %s').format(String(h.error))));
			else
				state = h.listening ? _('listening') : _('not listening');
			return [ String(h.port), '%s/%s'.format(h.namespace, h.name), String(h.localEndpoints), state ];
		});

		return E('div', {}, [
			E('h4', {}, _('Contested keys')),
			E('ul', { 'id': 'nodeportd-conflicts' }, conflicts.length
				? conflicts.map(function(c) { return E('li', {}, E('code', {}, plain(c))); })
				: E('li', {}, E('em', _('None: every Service holds what it asked for.')))),
			E('h4', {}, _('Health check ports')),
			table('nodeportd-healthchecks', [ _('Port'), _('Service'), _('Local endpoints'), _('State') ], checks,
				_('No Service with externalTrafficPolicy Local has a health check port.'))
		]);
	},

	renderAll: function(data) {
		const st = isObj(data[0]) ? data[0] : {};
		const err = errorOf(data[0]) || errorOf(data[1]) || errorOf(data[2]);
		const services = isObj(data[1]) ? list(data[1].items) : [];
		const endpoints = isObj(data[2]) ? list(data[2].items) : [];

		dom.content(this.nodes.error, err
			? E('div', { 'class': 'alert-message warning' }, [ E('strong', _('nodeportd did not answer:')), ' ', E('code', {}, plain(err)) ])
			: '');
		dom.content(this.nodes.dataplane, this.renderDataplane(st));
		dom.content(this.nodes.services, this.renderServices(services, endpoints));
		dom.content(this.nodes.addresses, this.renderAddresses(st));
		dom.content(this.nodes.bands, this.renderBands(st));
		dom.content(this.nodes.problems, this.renderProblems(st));
	},

	refresh: function(force) {
		return this.fetch(force === true).then(L.bind(this.renderAll, this), L.bind(function(err) {
			dom.content(this.nodes.error, E('div', { 'class': 'alert-message warning' },
				[ E('strong', _('nodeportd did not answer:')), ' ', E('code', {}, plain(err.message || err)) ]));
		}, this));
	},

	handleDelete: function(ns, name) {
		return new Promise(L.bind(function(resolve) {
			ui.showModal(_('Delete Service %s/%s?').format(ns, name), [
				E('p', {}, _('nodeportd releases its ClusterIP and NodePorts and removes its rules. Another Service may get them next.')),
				E('div', { 'class': 'right' }, [
					E('button', { 'class': 'btn', 'click': function() { ui.hideModal(); resolve(); } }, _('Cancel')),
					' ',
					E('button', {
						'class': 'btn cbi-button-negative',
						'id': 'nodeportd-confirm-delete',
						'click': ui.createHandlerFn(this, function() {
							return callServiceDelete(ns, name).then(L.bind(function(reply) {
								ui.hideModal();
								const err = errorOf(reply);
								if (err)
									ui.addNotification(_('Not deleted'), E('pre', { 'class': 'nodeportd-error' }, plain(err)), 'danger');
								return this.refresh(true);
							}, this)).finally(resolve);
						})
					}, _('Delete'))
				])
			]);
		}, this));
	},

	/* Apply the pasted JSON: a Service, Endpoints, EndpointSlice, or a List of them. Other
	 * kinds go to service_apply, so that the daemon words the refusal. */
	handleApply: function() {
		const out = this.nodes.applyResult;
		let objs;

		try {
			const parsed = JSON.parse(this.nodes.applyText.value);
			objs = (isObj(parsed) && /List$/.test(parsed.kind || '') && Array.isArray(parsed.items)) ? parsed.items : [ parsed ];
		}
		catch (e) {
			dom.content(out, E('pre', { 'class': 'nodeportd-error' }, plain(_('Not JSON: %s').format(e.message))));
			return Promise.resolve();
		}

		return objs.reduce(function(chain, obj) {
			return chain.then(function(lines) {
				const kind = isObj(obj) ? String(obj.kind || 'Service') : 'Service';
				const call = (kind === 'Endpoints' || kind === 'EndpointSlice') ? callEndpointsApply : callServiceApply;
				return call(obj).then(function(reply) {
					const err = errorOf(reply);
					if (err)
						return lines.concat([ E('pre', { 'class': 'nodeportd-error' }, plain(err)) ]);
					const meta = isObj(reply.object) && isObj(reply.object.metadata) ? reply.object.metadata : {};
					return lines.concat([ E('div', { 'class': 'nodeportd-applied' }, plain('%s/%s/%s %s'.format(
						kind.toLowerCase(), meta.namespace || 'default', meta.name || '?', reply.action || ''))) ]);
				});
			});
		}, Promise.resolve([])).then(L.bind(function(lines) {
			dom.content(out, lines);
			return this.refresh(true);
		}, this));
	},

	render: function(data) {
		const writable = L.hasViewPermission();

		this.nodes = {
			error: E('div', { 'id': 'nodeportd-error' }),
			dataplane: E('div'),
			services: E('div'),
			addresses: E('div'),
			bands: E('div'),
			problems: E('div'),
			applyText: E('textarea', {
				'id': 'nodeportd-apply-text',
				'class': 'cbi-input-textarea',
				'style': 'width:100%; font-family:monospace',
				'rows': 10,
				'placeholder': '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}',
				'disabled': writable ? null : ''
			}),
			applyResult: E('div', { 'id': 'nodeportd-apply-result' })
		};

		this.renderAll(data);

		poll.add(L.bind(this.refresh, this), 5);

		return E('div', { 'class': 'cbi-map', 'id': 'nodeportd-status' }, [
			E('style', {}, '.nodeportd-degraded { color: #c44 } .nodeportd-error { white-space: pre-wrap; color: #c44 }'),
			E('h2', {}, _('nodeportd')),
			E('div', { 'class': 'cbi-map-descr' },
				_('Kubernetes Services this router serves as a node: their NodePorts and ClusterIPs, where they answer, and whether the kernel holds the rules.')),
			this.nodes.error,
			E('div', { 'class': 'cbi-section' }, [ E('h3', {}, _('Dataplane')), this.nodes.dataplane ]),
			E('div', { 'class': 'cbi-section' }, [ E('h3', {}, _('Services')), this.nodes.services ]),
			E('div', { 'class': 'cbi-section' }, [
				E('h3', {}, _('Node addresses')),
				E('div', { 'class': 'cbi-section-descr' }, _('The addresses NodePorts answer on, and the entries of nodeport_addresses that picked them.')),
				this.nodes.addresses
			]),
			E('div', { 'class': 'cbi-section' }, [ E('h3', {}, _('Allocations')), this.nodes.bands ]),
			E('div', { 'class': 'cbi-section' }, [ E('h3', {}, _('Conflicts and health checks')), this.nodes.problems ]),
			E('div', { 'class': 'cbi-section' }, [
				E('h3', {}, _('Apply an object')),
				E('div', { 'class': 'cbi-section-descr' },
					_('Paste a Service, Endpoints or EndpointSlice (or a List of them) as JSON, as kubectl get -o json prints it.')),
				this.nodes.applyText,
				E('div', { 'class': 'right', 'style': 'margin-top:.5em' }, E('button', {
					'class': 'btn cbi-button cbi-button-apply',
					'id': 'nodeportd-apply',
					'disabled': writable ? null : '',
					'click': ui.createHandlerFn(this, 'handleApply')
				}, _('Apply'))),
				this.nodes.applyResult
			])
		]);
	},

	handleSave: null,
	handleSaveApply: null,
	handleReset: null
});
