#!/usr/bin/env python3
"""Compare nodeportd with a real kube-apiserver, scenario by scenario (issue 13).

Not a CI test: it needs a running kube-apiserver (with etcd), which CI cannot have.
It builds nothing; it takes the API server's kubeconfig and a running nodeportd's socket:

    tests/conformance/compare.py --setup dual --kubeconfig K --socket S [--nodeportctl BIN]

Both sides must be configured with the same ranges (see docs/conformance.md):
  dual:   service CIDRs 10.96.0.0/28 + fd00:96::/124, NodePorts 30000-30019
  single: service CIDR  10.96.0.0/28,                 NodePorts 30000-30019

Every scenario is a list of steps run on both sides in the same order: create or replace
a Service (POST / PUT on the API server, with the kubeconfig's credentials; `nodeportctl
apply` on nodeportd, which replaces a stored object as a PUT does), edit the stored object and write it back (the `get -o json | edit |
apply` round trip), delete, or apply an Endpoints/EndpointSlice. After each step the
harness records the outcome: the error text, or the stored object's spec (EndpointSlice:
addressType, endpoints, ports; Endpoints: subsets). Values the allocators chose are
replaced by symbols in order of appearance per side (`ip4#1`, `ip6#1`, `port#1`), so
"kept", "changed" and "freed and reused" compare without the random values. A request
may name a symbol (`"$port#1"`) to reuse the value that side allocated.

Output: one line per step (agree / DIFFER with both sides), a summary, and with
--markdown FILE a table for docs/conformance.md.
"""

import argparse
import copy
import ipaddress
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

NS = "default"


# ---------------------------------------------------------------- object builders

def svc(name, ports=None, **spec):
    """A v1 Service. ports: list of (port, extra-dict) or ints."""
    s = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": {}}
    if ports is not None:
        out = []
        for p in ports:
            if isinstance(p, int):
                out.append({"port": p})
            else:
                out.append(dict(p))
        s["spec"]["ports"] = out
    if "selector" not in spec and spec.get("type") != "ExternalName":
        s["spec"]["selector"] = {"app": name}
    elif spec.get("selector") is None:
        spec.pop("selector", None)
    for k, v in spec.items():
        if k == "type_":
            k = "type"
        s["spec"][k] = v
    return s


def np_svc(name, ports=(80,), **spec):
    return svc(name, list(ports), type="NodePort", **spec)


def lb_svc(name, ports=(80,), **spec):
    return svc(name, list(ports), type="LoadBalancer", **spec)


def slice_obj(name, service, address_type="IPv4", endpoints=None, ports=None):
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS, "labels": {"kubernetes.io/service-name": service}},
        "addressType": address_type,
        "endpoints": endpoints if endpoints is not None else [{"addresses": ["198.18.0.10"]}],
        "ports": ports if ports is not None else [{"name": "", "port": 8080, "protocol": "TCP"}],
    }


def endpoints_obj(name, subsets):
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": NS}, "subsets": subsets}


# ---------------------------------------------------------------- steps

def apply(obj):
    return ("apply", obj)


def edit(name, fn):
    """Read the stored Service back, change it with fn(obj), write it back."""
    return ("edit", name, fn)


def delete(name, kind="service"):
    return ("delete", kind, name)


def setv(path, value):
    """An edit function that sets spec fields: setv('type', 'ClusterIP')."""

    def fn(o):
        cur = o["spec"]
        parts = path.split(".")
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur.setdefault(p, {})
        if value is DEL:
            cur.pop(parts[-1], None)
        else:
            cur[parts[-1]] = value
        return o

    return fn


DEL = object()


def chain(*fns):
    def fn(o):
        for f in fns:
            o = f(o)
        return o

    return fn


# ---------------------------------------------------------------- scenarios

def fill_ips(prefix, n, **spec):
    return [apply(svc(f"{prefix}-{i}", [80], **spec)) for i in range(n)]


def scenarios_dual():
    S = []

    def sc(name, *steps, cleanup=()):
        S.append((name, list(steps), list(cleanup)))

    # --- updates a cluster takes: type changes drop obsolete values and free them
    sc("NodePort -> ClusterIP carrying nodePort: dropped and freed",
       apply(np_svc("t1")), edit("t1", setv("type", "ClusterIP")),
       apply(np_svc("t1b", [{"port": 80, "nodePort": "$port#1"}])))
    sc("NodePort -> ClusterIP with a changed nodePort: refused",
       apply(np_svc("t1c", [{"port": 80, "nodePort": 30001}])),
       edit("t1c", chain(setv("type", "ClusterIP"), setv("ports.0.nodePort", 30002))))
    sc("LB Local -> Cluster carrying healthCheckNodePort: dropped and freed",
       apply(lb_svc("t2", externalTrafficPolicy="Local")),
       edit("t2", setv("externalTrafficPolicy", "Cluster")),
       apply(np_svc("t2b", [{"port": 80, "nodePort": "$port#2"}])))
    sc("LB Local -> NodePort carrying healthCheckNodePort: dropped and freed",
       apply(lb_svc("t3", externalTrafficPolicy="Local")),
       edit("t3", setv("type", "NodePort")),
       apply(np_svc("t3b", [{"port": 80, "nodePort": "$port#2"}])))
    sc("LB -> ClusterIP carrying nodePort and allocateLoadBalancerNodePorts",
       apply(lb_svc("t3c")), edit("t3c", setv("type", "ClusterIP")))
    sc("ClusterIP -> ExternalName carrying clusterIP: freed, the next Service gets it",
       apply(svc("t4", [80], clusterIP="10.96.0.9")),
       edit("t4", chain(setv("type", "ExternalName"), setv("externalName", "db.example.com"))),
       apply(svc("t4b", [80], clusterIP="10.96.0.9")))
    sc("ExternalName -> ClusterIP: allocates",
       apply(svc("t4c", [80], type="ExternalName", externalName="db.example.com", selector=None)),
       edit("t4c", chain(setv("type", "ClusterIP"), setv("externalName", DEL))))
    sc("RequireDualStack -> SingleStack carrying both IPs: secondary released",
       apply(svc("t5", [80], ipFamilyPolicy="RequireDualStack")),
       edit("t5", setv("ipFamilyPolicy", "SingleStack")),
       apply(svc("t5b", [80], ipFamilyPolicy="SingleStack", ipFamilies=["IPv6"], clusterIP="$ip6#1")))
    sc("PreferDualStack -> SingleStack carrying both IPs",
       apply(svc("t5c", [80], ipFamilyPolicy="PreferDualStack")),
       edit("t5c", setv("ipFamilyPolicy", "SingleStack")))
    sc("SingleStack -> RequireDualStack: adds the secondary",
       apply(svc("t5d", [80])),
       edit("t5d", chain(setv("ipFamilyPolicy", "RequireDualStack"), setv("ipFamilies", DEL))))
    sc("allocateLoadBalancerNodePorts false, update without nodePorts: dropped and freed",
       apply(lb_svc("t6")),
       apply(lb_svc("t6", allocateLoadBalancerNodePorts=False)),
       apply(np_svc("t6b", [{"port": 80, "nodePort": "$port#1"}])))
    sc("allocateLoadBalancerNodePorts false, round trip carrying nodePorts: kept",
       apply(lb_svc("t6c")), edit("t6c", setv("allocateLoadBalancerNodePorts", False)))
    sc("allocateLoadBalancerNodePorts false on create: no nodePort",
       apply(lb_svc("t6d", allocateLoadBalancerNodePorts=False)))

    # --- allocation semantics
    sc("nodePort: 0 allocates", apply(np_svc("a1", [{"port": 80, "nodePort": 0}])))
    sc("healthCheckNodePort: 0 allocates",
       apply(lb_svc("a2", externalTrafficPolicy="Local", healthCheckNodePort=0)))
    sc("unnamed port number change keeps its nodePort",
       apply(np_svc("a3", [80])), apply(np_svc("a3", [81])))
    sc("named port renamed gets a new nodePort",
       apply(np_svc("a3b", [{"port": 80, "name": "http"}])),
       apply(np_svc("a3b", [{"port": 80, "name": "web"}])))
    sc("reapply without nodePorts keeps them; naming one moves it",
       apply(np_svc("a3c", [80])), apply(np_svc("a3c", [80])),
       apply(np_svc("a3c", [{"port": 80, "nodePort": 30003}])))
    sc("static clusterIP outside the range", apply(svc("a4", [80], clusterIP="10.97.0.5")))
    sc("static clusterIP = network address", apply(svc("a4b", [80], clusterIP="10.96.0.0")))
    sc("static clusterIP = broadcast address", apply(svc("a4c", [80], clusterIP="10.96.0.15")))
    sc("static IPv6 clusterIP outside the range",
       apply(svc("a4d", [80], clusterIP="fd00:97::5", ipFamilies=["IPv6"])))
    sc("static clusterIP = first address (default/kubernetes)", apply(svc("a5", [80], clusterIP="10.96.0.1")))
    sc("static clusterIP already allocated",
       apply(svc("a6", [80], clusterIP="10.96.0.10")), apply(svc("a6b", [80], clusterIP="10.96.0.10")))
    sc("static nodePort already allocated",
       apply(np_svc("a7", [{"port": 80, "nodePort": 30009}])),
       apply(np_svc("a7b", [{"port": 80, "nodePort": 30009}])))
    sc("static nodePort outside the range", apply(np_svc("a8", [{"port": 80, "nodePort": 31000}])))
    sc("healthCheckNodePort already allocated",
       apply(np_svc("a9", [{"port": 80, "nodePort": 30009}])),
       apply(lb_svc("a9b", externalTrafficPolicy="Local", healthCheckNodePort=30009)))
    sc("healthCheckNodePort outside the range",
       apply(lb_svc("a9c", externalTrafficPolicy="Local", healthCheckNodePort=31000)))
    sc("healthCheckNodePort is immutable",
       apply(lb_svc("a9d", externalTrafficPolicy="Local")),
       edit("a9d", setv("healthCheckNodePort", 30011)))
    sc("TCP and UDP on one port share a nodePort",
       apply(np_svc("a10", [{"port": 53, "name": "dns", "protocol": "UDP"},
                            {"port": 53, "name": "dns-tcp", "protocol": "TCP"}])))
    sc("TCP and UDP with the same static nodePort",
       apply(np_svc("a10b", [{"port": 53, "name": "dns", "protocol": "UDP", "nodePort": 30012},
                             {"port": 53, "name": "dns-tcp", "protocol": "TCP", "nodePort": 30012}])))
    sc("two TCP ports with the same static nodePort",
       apply(np_svc("a10c", [{"port": 80, "name": "a", "nodePort": 30012},
                             {"port": 81, "name": "b", "nodePort": 30012}])))
    sc("ClusterIP range full names the Service",
       *fill_ips("full", 13), apply(svc("c28-over", [80])),
       cleanup=[delete(f"full-{i}") for i in range(13)])
    sc("NodePort range full",
       apply(np_svc("pf", [{"port": 1000 + i, "name": f"p{i}"} for i in range(20)])),
       apply(np_svc("pf-over", [80])),
       cleanup=[delete("pf")])
    sc("delete frees clusterIP and nodePort for reuse",
       apply(np_svc("d1", [80])), delete("d1"),
       apply(np_svc("d1b", [{"port": 80, "nodePort": "$port#1"}], clusterIP="$ip4#1")))
    sc("clusterIP is immutable",
       apply(svc("im1", [80], clusterIP="10.96.0.11")), edit("im1", setv("clusterIP", "10.96.0.12")))
    sc("clusterIP may be omitted on update",
       apply(svc("im2", [80])), apply(svc("im2", [80])))

    # --- objects a cluster accepts
    sc("Service name 1web (RFC 1123 label)", apply(svc("1web", [80])))
    sc("Service name with a dot", apply(svc("web.x", [80])))
    sc("Service name with upper case", apply(svc("Web", [80])))
    sc("Service name 64 characters", apply(svc("a" * 64, [80])))
    sc("sessionAffinityConfig with sessionAffinity None is dropped",
       apply(svc("o1", [80], sessionAffinity="None",
                 sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})))
    sc("externalIPs on a headless Service", apply(svc("o2", [80], clusterIP="None", externalIPs=["198.18.0.50"])))
    sc("externalName on a ClusterIP Service", apply(svc("o3", [80], externalName="db.example.com")))
    sc("unparsable loadBalancerIP", apply(lb_svc("o4", loadBalancerIP="not-an-ip")))
    sc("clusterIPs without clusterIP", apply(svc("o5", [80], clusterIPs=["10.96.0.12"])))
    sc("clusterIP and clusterIPs disagree", apply(svc("o5b", [80], clusterIP="10.96.0.12", clusterIPs=["10.96.0.13"])))

    # --- defaulting
    sc("two families without ipFamilyPolicy", apply(svc("f1", [80], ipFamilies=["IPv4", "IPv6"])))
    sc("type absent is stored as ClusterIP", apply(svc("f2", [80])))
    sc("LoadBalancer stores allocateLoadBalancerNodePorts: true", apply(lb_svc("f3")))
    sc("ClientIP stores timeoutSeconds 10800", apply(svc("f4", [80], sessionAffinity="ClientIP")))
    sc("ClientIP timeoutSeconds 0 refused",
       apply(svc("f4b", [80], sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 0}})))
    sc("headless without selector", apply(svc("f5", [80], clusterIP="None", selector=None)))
    sc("headless with selector", apply(svc("f5b", [80], clusterIP="None")))
    sc("IPv6 only Service", apply(svc("f6", [80], ipFamilies=["IPv6"])))
    sc("targetPort defaults to port; protocol to TCP", apply(svc("f7", [{"port": 8080, "name": "x"}])))
    sc("ExternalName stored", apply(svc("f8", None, type="ExternalName", externalName="db.example.com", selector=None)))

    # --- texts
    sc("several errors listed",
       apply(svc("e1", [{"port": 0, "targetPort": 70000}])))
    sc("invalid clusterIP field path", apply(svc("e2", [80], clusterIP="10.96.0.300")))
    sc("invalid loadBalancerSourceRanges", apply(lb_svc("e3", loadBalancerSourceRanges=["10.0.0.0/33"])))
    sc("invalid selector value", apply(svc("e4", [80], selector={"app": "-bad-"})))
    sc("ports missing on ClusterIP", apply(svc("e5", [])))
    sc("duplicate port", apply(svc("e6", [{"port": 80, "name": "a"}, {"port": 80, "name": "a"}])))
    sc("unnamed port among two", apply(svc("e7", [{"port": 80}, {"port": 81, "name": "b"}])))
    sc("invalid protocol", apply(svc("e8", [{"port": 80, "protocol": "ICMP"}])))
    sc("nodePort on ClusterIP (create)", apply(svc("e9", [{"port": 80, "nodePort": 30005}])))
    sc("healthCheckNodePort with Cluster policy", apply(lb_svc("e10", healthCheckNodePort=30006)))
    sc("externalTrafficPolicy on ClusterIP", apply(svc("e11", [80], externalTrafficPolicy="Local")))
    sc("invalid externalTrafficPolicy", apply(np_svc("e12", externalTrafficPolicy="Bogus")))
    sc("invalid type", apply(svc("e13", [80], type="Bogus")))
    sc("ExternalName without externalName", apply(svc("e14", None, type="ExternalName", selector=None)))
    sc("invalid externalIPs", apply(svc("e15", [80], externalIPs=["not-an-ip"])))
    sc("invalid ipFamilyPolicy", apply(svc("e16", [80], ipFamilyPolicy="Bogus")))
    sc("RequireDualStack with one family listed", apply(svc("e17", [80], ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4"])))
    sc("duplicate ipFamilies", apply(svc("e18", [80], ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4", "IPv4"])))
    sc("invalid targetPort name", apply(svc("e19", [{"port": 80, "targetPort": "-x-"}])))
    sc("port name too long", apply(svc("e20", [{"port": 80, "name": "a" * 16}, {"port": 81, "name": "b"}])))

    # --- EndpointSlice / Endpoints
    sc("EndpointSlice port 70000 accepted",
       apply(slice_obj("s1", "web", ports=[{"name": "", "port": 70000, "protocol": "TCP"}])))
    sc("EndpointSlice IPv6 address in an IPv4 slice",
       apply(slice_obj("s2", "web", endpoints=[{"addresses": ["2001:db8::1"]}])))
    sc("EndpointSlice invalid address", apply(slice_obj("s3", "web", endpoints=[{"addresses": ["bogus"]}])))
    sc("EndpointSlice without addresses", apply(slice_obj("s4", "web", endpoints=[{"addresses": []}])))
    sc("EndpointSlice invalid addressType", apply(slice_obj("s5", "web", address_type="IPv5")))
    sc("EndpointSlice FQDN", apply(slice_obj("s6", "web", address_type="FQDN", endpoints=[{"addresses": ["db.example.com"]}])))
    sc("EndpointSlice invalid protocol",
       apply(slice_obj("s7", "web", ports=[{"name": "", "port": 80, "protocol": "ICMP"}])))
    sc("EndpointSlice port without number", apply(slice_obj("s8", "web", ports=[{"name": "x", "protocol": "TCP"}])))
    sc("EndpointSlice IPv6 slice", apply(slice_obj("s9", "web", address_type="IPv6", endpoints=[{"addresses": ["2001:db8::1"]}])))
    sc("EndpointSlice loopback address", apply(slice_obj("s10", "web", endpoints=[{"addresses": ["127.0.0.1"]}])))
    sc("EndpointSlice duplicate port names",
       apply(slice_obj("s11", "web", ports=[{"name": "a", "port": 80, "protocol": "TCP"}, {"name": "a", "port": 81, "protocol": "TCP"}])))
    sc("Endpoints ok", apply(endpoints_obj("ep1", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 8080}]}])))
    sc("Endpoints invalid IP", apply(endpoints_obj("ep2", [{"addresses": [{"ip": "bogus"}], "ports": [{"port": 8080}]}])))
    sc("Endpoints loopback IP", apply(endpoints_obj("ep3", [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 8080}]}])))
    sc("Endpoints port 70000", apply(endpoints_obj("ep4", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 70000}]}])))
    sc("Endpoints port missing protocol defaults TCP",
       apply(endpoints_obj("ep5", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80, "name": "http"}]}])))
    sc("Endpoints invalid protocol",
       apply(endpoints_obj("ep6", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80, "protocol": "ICMP"}]}])))
    sc("Endpoints link-local IP", apply(endpoints_obj("ep7", [{"addresses": [{"ip": "169.254.1.1"}], "ports": [{"port": 80}]}])))

    # --- more updates and allocations
    sc("ClusterIP -> NodePort allocates",
       apply(svc("u1", [80])), edit("u1", setv("type", "NodePort")))
    sc("NodePort -> LoadBalancer keeps nodePorts",
       apply(np_svc("u2")), edit("u2", setv("type", "LoadBalancer")))
    sc("NodePort Local gets no healthCheckNodePort", apply(np_svc("u3", externalTrafficPolicy="Local")))
    sc("LB Cluster -> Local allocates healthCheckNodePort",
       apply(lb_svc("u4")), edit("u4", setv("externalTrafficPolicy", "Local")))
    sc("LB Local -> Cluster with a changed healthCheckNodePort",
       apply(lb_svc("u5", externalTrafficPolicy="Local")),
       edit("u5", chain(setv("externalTrafficPolicy", "Cluster"), setv("healthCheckNodePort", 30013))))
    sc("adding a port allocates only the new one",
       apply(np_svc("u6", [{"port": 80, "name": "a"}])),
       apply(np_svc("u6", [{"port": 80, "name": "a"}, {"port": 443, "name": "b"}])))
    sc("removing a port frees its nodePort",
       apply(np_svc("u7", [{"port": 80, "name": "a"}, {"port": 443, "name": "b"}])),
       apply(np_svc("u7", [{"port": 80, "name": "a"}])),
       apply(np_svc("u7b", [{"port": 80, "nodePort": "$port#2"}])))
    sc("static dual-stack clusterIPs",
       apply(svc("u8", [80], ipFamilyPolicy="RequireDualStack", clusterIP="10.96.0.7", clusterIPs=["10.96.0.7", "fd00:96::7"])))
    sc("IPv6-first dual-stack", apply(svc("u9", [80], ipFamilyPolicy="PreferDualStack", ipFamilies=["IPv6", "IPv4"])))
    sc("PreferDualStack on a dual-stack setup", apply(svc("u10", [80], ipFamilyPolicy="PreferDualStack")))
    sc("ipFamilies changed on update",
       apply(svc("u11", [80])), edit("u11", setv("ipFamilies", ["IPv6"])))
    sc("clusterIP None on update of a ClusterIP Service",
       apply(svc("u12", [80])), edit("u12", chain(setv("clusterIP", "None"), setv("clusterIPs", ["None"]))))
    sc("sessionAffinity invalid", apply(svc("u13", [80], sessionAffinity="Bogus")))
    sc("ClientIP timeoutSeconds too large",
       apply(svc("u14", [80], sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 86401}})))
    sc("loadBalancerSourceRanges stored", apply(lb_svc("u15", loadBalancerSourceRanges=["198.18.0.0/24"])))
    sc("loadBalancerSourceRanges on NodePort", apply(np_svc("u16", loadBalancerSourceRanges=["198.18.0.0/24"])))
    sc("internalTrafficPolicy invalid", apply(svc("u17", [80], internalTrafficPolicy="Bogus")))
    sc("externalIPs stored and listed", apply(svc("u18", [80], externalIPs=["198.18.0.60", "198.18.0.61"])))
    sc("externalIPs loopback", apply(svc("u19", [80], externalIPs=["127.0.0.1"])))
    sc("headless with nodePort type", apply(np_svc("u20", clusterIP="None")))
    sc("targetPort named", apply(svc("u21", [{"port": 80, "targetPort": "http"}])))
    sc("appProtocol stored", apply(svc("u22", [{"port": 80, "appProtocol": "http"}])))
    sc("loadBalancerClass stored and dropped leaving LoadBalancer",
       apply(lb_svc("u23", loadBalancerClass="example.com/lb")), edit("u23", setv("type", "NodePort")))
    sc("publishNotReadyAddresses stored", apply(svc("u24", [80], publishNotReadyAddresses=True)))
    sc("EndpointSlice port protocol defaults to TCP",
       apply(slice_obj("s12", "web", ports=[{"name": "http", "port": 80}])))
    sc("EndpointSlice port without name", apply(slice_obj("s12b", "web", ports=[{"port": 80}])))
    sc("EndpointSlice with conditions and nodeName",
       apply(slice_obj("s13", "web", endpoints=[{"addresses": ["198.18.0.11"], "conditions": {"ready": False},
                                                 "nodeName": "edge-1"}])))
    sc("EndpointSlice invalid nodeName",
       apply(slice_obj("s14", "web", endpoints=[{"addresses": ["198.18.0.11"], "nodeName": "Bad_Name"}])))
    sc("EndpointSlice port name invalid", apply(slice_obj("s15", "web", ports=[{"name": "Bad", "port": 80, "protocol": "TCP"}])))
    sc("EndpointSlice without service-name label",
       apply({**slice_obj("s16", "web"), "metadata": {"name": "s16", "namespace": NS}}))
    sc("Endpoints notReadyAddresses stored",
       apply(endpoints_obj("ep8", [{"notReadyAddresses": [{"ip": "198.18.0.12"}], "ports": [{"port": 80}]}])))
    sc("Endpoints duplicate port names",
       apply(endpoints_obj("ep9", [{"addresses": [{"ip": "198.18.0.10"}],
                                    "ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]}])))
    sc("Endpoints two unnamed ports",
       apply(endpoints_obj("ep10", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80}, {"port": 81}]}])))
    sc("Endpoints without subsets", apply(endpoints_obj("ep11", [])))
    sc("Endpoints IPv6 address", apply(endpoints_obj("ep12", [{"addresses": [{"ip": "2001:db8::10"}], "ports": [{"port": 80}]}])))

    # --- more edges
    sc("update with a stale resourceVersion",
       apply(svc("x1", [80])), edit("x1", lambda o: {**o, "metadata": {**o["metadata"], "resourceVersion": "1"}}))
    sc("delete of a missing Service", delete("x2-missing"))
    sc("LB with allocateLoadBalancerNodePorts false and a static nodePort",
       apply(lb_svc("x3", [{"port": 80, "nodePort": 30004}], allocateLoadBalancerNodePorts=False)))
    sc("one static and one dynamic nodePort",
       apply(np_svc("x4", [{"port": 80, "name": "a", "nodePort": 30006}, {"port": 81, "name": "b"}])))
    sc("static IPv6 clusterIP = network address",
       apply(svc("x5", [80], clusterIP="fd00:96::", ipFamilies=["IPv6"])))
    sc("static IPv6 clusterIP = last address",
       apply(svc("x6", [80], clusterIP="fd00:96::f", ipFamilies=["IPv6"])))
    sc("static IPv6 clusterIP = first address",
       apply(svc("x6b", [80], clusterIP="fd00:96::1", ipFamilies=["IPv6"])))
    sc("clusterIPs with two IPv4 addresses",
       apply(svc("x7", [80], ipFamilyPolicy="RequireDualStack", clusterIP="10.96.0.5", clusterIPs=["10.96.0.5", "10.96.0.6"])))
    sc("SingleStack with two ipFamilies",
       apply(svc("x8", [80], ipFamilyPolicy="SingleStack", ipFamilies=["IPv4", "IPv6"])))
    sc("headless RequireDualStack with selector",
       apply(svc("x9", [80], clusterIP="None", ipFamilyPolicy="RequireDualStack")))
    sc("headless clusterIPs None",
       apply(svc("x10", [80], clusterIP="None", clusterIPs=["None"])))
    sc("ExternalName with a clusterIP",
       apply(svc("x11", [80], type="ExternalName", externalName="db.example.com", clusterIP="10.96.0.4", selector=None)))
    sc("ExternalName invalid externalName",
       apply(svc("x12", [80], type="ExternalName", externalName="not_valid", selector=None)))
    sc("port name with upper case", apply(svc("x13", [{"port": 80, "name": "Http"}])))
    sc("invalid loadBalancerClass", apply(lb_svc("x14", loadBalancerClass="-bad-")))
    sc("loadBalancerClass on NodePort", apply(np_svc("x15", loadBalancerClass="example.com/lb")))
    sc("trafficDistribution PreferClose", apply(svc("x16", [80], trafficDistribution="PreferClose")))
    sc("trafficDistribution invalid", apply(svc("x17", [80], trafficDistribution="Bogus")))
    sc("status.loadBalancer in a create request",
       apply({**lb_svc("x18"), "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.70"}]}}}))
    sc("ClientIP on a headless Service", apply(svc("x19", [80], clusterIP="None", sessionAffinity="ClientIP")))
    sc("UDP and SCTP ports", apply(np_svc("x20", [{"port": 53, "name": "u", "protocol": "UDP"},
                                                  {"port": 9, "name": "s", "protocol": "SCTP"}])))
    sc("NodePort type with ipFamilyPolicy RequireDualStack",
       apply(np_svc("x21", ipFamilyPolicy="RequireDualStack")))
    sc("LoadBalancer Local with static healthCheckNodePort",
       apply(lb_svc("x22", externalTrafficPolicy="Local", healthCheckNodePort=30014)))
    sc("changing clusterIPs secondary on update",
       apply(svc("x23", [80], ipFamilyPolicy="RequireDualStack")),
       edit("x23", lambda o: {**o, "spec": {**o["spec"], "clusterIPs": [o["spec"]["clusterIPs"][0], "fd00:97::9"]}}))
    sc("re-applying the stored object unchanged",
       apply(np_svc("x24")), edit("x24", lambda o: o))
    sc("port 65536", apply(svc("x25", [65536])))
    sc("negative nodePort", apply(np_svc("x26", [{"port": 80, "nodePort": -1}])))
    sc("Service without spec.ports and selector, type ClusterIP", apply(svc("x27", None, selector=None)))

    # --- endpoints, more
    sc("EndpointSlice hostname invalid",
       apply(slice_obj("s17", "web", endpoints=[{"addresses": ["198.18.0.11"], "hostname": "Bad_Host"}])))
    sc("EndpointSlice appProtocol stored",
       apply(slice_obj("s18", "web", ports=[{"name": "h", "port": 80, "protocol": "TCP", "appProtocol": "http"}])))
    sc("EndpointSlice unspecified address",
       apply(slice_obj("s19", "web", endpoints=[{"addresses": ["0.0.0.0"]}])))
    sc("EndpointSlice link-local IPv6 address",
       apply(slice_obj("s20", "web", address_type="IPv6", endpoints=[{"addresses": ["fe80::1"]}])))
    sc("EndpointSlice update replaces endpoints",
       apply(slice_obj("s21", "web")),
       apply(slice_obj("s21", "web", endpoints=[{"addresses": ["198.18.0.12"]}, {"addresses": ["198.18.0.13"]}])))
    sc("EndpointSlice without ports", apply({**slice_obj("s22", "web"), "ports": []}))
    sc("Endpoints hostname invalid",
       apply(endpoints_obj("ep13", [{"addresses": [{"ip": "198.18.0.10", "hostname": "Bad_Host"}], "ports": [{"port": 80}]}])))
    sc("Endpoints unspecified address",
       apply(endpoints_obj("ep14", [{"addresses": [{"ip": "0.0.0.0"}], "ports": [{"port": 80}]}])))
    sc("Endpoints subset without addresses",
       apply(endpoints_obj("ep15", [{"ports": [{"port": 80}]}])))
    sc("Endpoints port name invalid",
       apply(endpoints_obj("ep16", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80, "name": "Bad"}]}])))
    sc("Endpoints name with upper case",
       apply(endpoints_obj("Ep17", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80}]}])))
    sc("Endpoints update replaces subsets",
       apply(endpoints_obj("ep18", [{"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 80}]}])),
       apply(endpoints_obj("ep18", [{"addresses": [{"ip": "198.18.0.11"}], "ports": [{"port": 81, "protocol": "UDP"}]}])))
    return S


def scenarios_single():
    S = []

    def sc(name, *steps, cleanup=()):
        S.append((name, list(steps), list(cleanup)))

    sc("static IPv6 clusterIP on an IPv4-only setup",
       apply(svc("v1", [80], clusterIP="2001:db8::5")))
    sc("ipFamilies IPv6 on an IPv4-only setup", apply(svc("v2", [80], ipFamilies=["IPv6"])))
    sc("RequireDualStack on an IPv4-only setup", apply(svc("v3", [80], ipFamilyPolicy="RequireDualStack")))
    sc("PreferDualStack on an IPv4-only setup", apply(svc("v4", [80], ipFamilyPolicy="PreferDualStack")))
    sc("headless without selector on an IPv4-only setup", apply(svc("v5", [80], clusterIP="None", selector=None)))
    sc("ClusterIP range full names the Service (single)",
       *fill_ips("sfull", 13), apply(svc("s28-over", [80])),
       cleanup=[delete(f"sfull-{i}") for i in range(13)])
    return S


# ---------------------------------------------------------------- sides

def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def clean_err(text):
    lines = [l for l in text.splitlines()
             if l.strip() and not l.startswith("Warning:") and not re.match(r"error: \d+ object\(s\) from", l)]
    t = "\n".join(lines).strip()
    t = re.sub(r'^Error from server \(\w+\): ', "", t)
    t = re.sub(r'^error when (creating|replacing|deleting) "STDIN": ', "", t)
    t = re.sub(r'^The ', "", t)
    t = re.sub(r'^error: ', "", t)
    return t


class ApiServer:
    """The API server over its REST API, with the credentials of the kubeconfig's current
    context (token or client certificate), so errors are the Status messages verbatim
    (kubectl reformats a list of causes as bullets and drops the API group of the kind)."""

    name = "apiserver"

    def __init__(self, kubeconfig):
        cfg = json.loads(subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "config", "view", "--raw", "--minify",
                                         "-o", "json"], capture_output=True, text=True, check=True).stdout)
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.server = cluster["server"].rstrip("/")
        self.ctx = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = "Bearer " + user["token"]
        elif user.get("client-certificate"):
            self.ctx.load_cert_chain(user["client-certificate"], user.get("client-key"))
        self.exists = set()

    def http(self, method, path, obj=None):
        data = json.dumps(obj).encode() if obj is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=60) as r:
                return json.loads(r.read()), None
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
            return None, body.get("message", str(e))

    def apply(self, obj):
        key = (obj["kind"], obj["metadata"]["name"])
        base = collection(obj["kind"])
        if key in self.exists:
            got, err = self.http("PUT", base + "/" + obj["metadata"]["name"], obj)
        else:
            got, err = self.http("POST", base, obj)
        if got is not None:
            self.exists.add(key)
        return got, err

    def get(self, kind, name):
        return self.http("GET", collection(kind) + "/" + name)

    def delete(self, kind, name):
        got, err = self.http("DELETE", collection(kind) + "/" + name)
        for k in list(self.exists):
            if k[1] == name and kind_resource(k[0]) == kind_resource(kind):
                self.exists.discard(k)
        return got is not None, err


def collection(kind):
    return {
        "service": f"/api/v1/namespaces/{NS}/services",
        "endpoints": f"/api/v1/namespaces/{NS}/endpoints",
        "endpointslice": f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
    }[kind_resource(kind)]


class Nodeportd:
    name = "nodeportd"

    def __init__(self, ctl, socket):
        self.ctl = ctl
        self.env = dict(os.environ, NODEPORTD_SOCKET=socket)

    def c(self, *args, stdin=None):
        p = subprocess.run([*self.ctl, *args], input=stdin, capture_output=True, text=True, timeout=60, env=self.env)
        return p.returncode, p.stdout, p.stderr

    def one(self, *args, stdin=None):
        """Run nodeportctl with `-o json`: (the object, None) or (None, its error)."""
        rc, out, err = self.c(*args, "-o", "json", stdin=stdin)
        if rc != 0:
            return None, clean_err(err)
        got = json.loads(out)
        if got.get("kind") == "List":
            got = got["items"][0]
        return got, None

    def apply(self, obj):
        return self.one("apply", "-f", "-", stdin=json.dumps(obj))

    def get(self, kind, name):
        return self.one("get", kind_resource(kind), name, "-n", NS)

    def delete(self, kind, name):
        rc, out, err = self.c("delete", kind_resource(kind), name, "-n", NS)
        return rc == 0, None if rc == 0 else clean_err(err)


def kind_resource(kind):
    return {"Service": "service", "service": "service", "EndpointSlice": "endpointslice",
            "endpointslice": "endpointslice", "Endpoints": "endpoints", "endpoints": "endpoints"}[kind]


# ---------------------------------------------------------------- symbols

class Symbols:
    def __init__(self):
        self.by_value = {}
        self.by_name = {}
        self.count = {}

    def name_for(self, value, kind, literal):
        if value in self.by_value:
            return self.by_value[value]
        if literal:
            return value
        n = self.count.get(kind, 0) + 1
        self.count[kind] = n
        sym = f"{kind}#{n}"
        self.by_value[value] = sym
        self.by_name[sym] = value
        return sym

    def resolve(self, obj):
        if isinstance(obj, dict):
            return {k: self.resolve(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.resolve(v) for v in obj]
        if isinstance(obj, str) and obj.startswith("$"):
            v = self.by_name.get(obj[1:])
            if v is None:
                return obj  # never allocated on this side: sent as is, the error says so
            return v
        return obj


def ip_kind(v):
    try:
        return "ip6" if ipaddress.ip_address(v).version == 6 else "ip4"
    except ValueError:
        return None


def project(obj, sent, syms):
    """What is compared of a stored object: its spec (or slice/endpoints content), with
    allocated values replaced by symbols."""
    if obj is None:
        return None
    kind = obj.get("kind")
    if kind == "EndpointSlice":
        return {k: obj.get(k) for k in ("addressType", "endpoints", "ports")}
    if kind == "Endpoints":
        return {"subsets": obj.get("subsets")}
    spec = copy.deepcopy(obj.get("spec", {}))
    sspec = (sent or {}).get("spec", {})
    sent_ips = set([sspec.get("clusterIP")] + list(sspec.get("clusterIPs") or []))
    sent_ports = set(p.get("nodePort") for p in sspec.get("ports") or []) | {sspec.get("healthCheckNodePort")}
    if spec.get("clusterIP") and ip_kind(spec["clusterIP"]):
        spec["clusterIP"] = syms.name_for(spec["clusterIP"], ip_kind(spec["clusterIP"]), spec["clusterIP"] in sent_ips)
    if spec.get("clusterIPs"):
        spec["clusterIPs"] = [syms.name_for(v, ip_kind(v), v in sent_ips) if ip_kind(v) else v for v in spec["clusterIPs"]]
    for p in spec.get("ports") or []:
        if p.get("nodePort"):
            p["nodePort"] = syms.name_for(p["nodePort"], "port", p["nodePort"] in sent_ports)
    if spec.get("healthCheckNodePort"):
        spec["healthCheckNodePort"] = syms.name_for(spec["healthCheckNodePort"], "port", spec["healthCheckNodePort"] in sent_ports)
    return {"spec": spec, "status": obj.get("status") or {}}


def strip_for_edit(obj):
    o = copy.deepcopy(obj)
    md = o.get("metadata", {})
    for k in ("managedFields", "uid", "creationTimestamp", "generation", "annotations"):
        md.pop(k, None)
    return o


def run_steps(side, steps, syms, cleanup_names):
    results = []
    for st in steps:
        if st[0] == "apply":
            obj = syms.resolve(copy.deepcopy(st[1]))
            got, err = side.apply(obj)
            if got is not None and obj["kind"] == "Service":
                cleanup_names.add((obj["kind"], obj["metadata"]["name"]))
            elif got is not None:
                cleanup_names.add((obj["kind"], obj["metadata"]["name"]))
            results.append(("apply " + obj["kind"] + "/" + obj["metadata"]["name"], symbolize_text(err, syms),
                            project(got, obj, syms)))
        elif st[0] == "edit":
            cur, err = side.get("service", st[1])
            if cur is None:
                results.append(("edit " + st[1], "read back failed: " + err, None))
                continue
            obj = st[2](strip_for_edit(cur))
            got, err = side.apply(obj)
            results.append(("edit service/" + st[1], symbolize_text(err, syms), project(got, obj, syms)))
        elif st[0] == "delete":
            ok, err = side.delete(st[1], st[2])
            results.append(("delete " + st[1] + "/" + st[2], err, None))
    return results


def cleanup(side, names):
    for kind, name in sorted(names):
        side.delete(kind, name)


# Differences docs/extensions.md documents as deliberate; reported as "documented".
def documented(api_err, npd_err):
    if api_err and npd_err and api_err == "Internal error occurred: " + npd_err:
        return "allocation failures: same text without the InternalError prefix, reason RangeFull/AlreadyAllocated/Invalid"
    if api_err is None and npd_err and 'Unsupported value: "FQDN"' in npd_err:
        return "FQDN EndpointSlices are refused by name (nodeportd DNATs to addresses)"
    if api_err and api_err.startswith("Operation cannot be fulfilled") and npd_err is None:
        return "apply ignores metadata.resourceVersion (objects come from another store)"
    return None


def documented_stored(api_obj, npd_obj):
    if (api_obj and npd_obj and "addressType" in api_obj
            and {k: v or [] for k, v in api_obj.items()} == {k: v or [] for k, v in npd_obj.items()}):
        return "an empty EndpointSlice list is served as [], not null"
    if (api_obj and npd_obj and api_obj.get("spec") == npd_obj.get("spec")
            and npd_obj.get("status", {}).get("loadBalancer", {}).get("ingress")
            and not api_obj.get("status", {}).get("loadBalancer", {}).get("ingress")):
        return "status.loadBalancer.ingress of the request is kept (the addresses a LoadBalancer answers on)"
    return None


def symbolize_text(text, syms):
    """Allocated IPs in an error text, as symbols (longest first)."""
    if not text:
        return text
    for v in sorted((v for v in syms.by_value if isinstance(v, str)), key=len, reverse=True):
        text = re.sub(r'(?<![0-9a-fA-F:.])' + re.escape(v) + r'(?![0-9a-fA-F:.])', syms.by_value[v], text)
    return text


def diff_text(a, b):
    return f"\n      apiserver: {a}\n      nodeportd: {b}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", choices=["dual", "single"], required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--nodeportctl", default="nodeportctl", help="nodeportctl binary (or 'nodeportd ctl')")
    ap.add_argument("--only", help="run scenarios whose name contains this")
    ap.add_argument("--markdown", help="append a Markdown table of the results to this file")
    ap.add_argument("--json", help="write every step's outcome on both sides to this file")
    a = ap.parse_args()

    api = ApiServer(a.kubeconfig)
    npd = Nodeportd(a.nodeportctl.split(), a.socket)
    scen = scenarios_dual() if a.setup == "dual" else scenarios_single()
    agree = differ = documented_n = 0
    rows = []
    dump = []
    for name, steps, clean in scen:
        if a.only and a.only not in name:
            continue
        outcome = {}
        for side in (api, npd):
            syms = Symbols()
            names = set()
            res = run_steps(side, steps, syms, names)
            for c in clean:
                side.delete(c[1], c[2])
            cleanup(side, names)
            outcome[side.name] = res
        diffs = []
        notes = []
        for (label, e1, o1), (_, e2, o2) in zip(outcome["apiserver"], outcome["nodeportd"]):
            if e1 != e2 and documented(e1, e2):
                notes.append(documented(e1, e2))
            elif e1 != e2:
                diffs.append(f"    {label}: error{diff_text(e1, e2)}")
            elif o1 != o2 and documented_stored(o1, o2):
                notes.append(documented_stored(o1, o2))
            elif o1 != o2:
                diffs.append(f"    {label}: stored{diff_text(json.dumps(o1, sort_keys=True), json.dumps(o2, sort_keys=True))}")
        last = outcome["apiserver"][-1]
        summary = f"error: {last[1]}" if last[1] else "ok"
        if diffs:
            differ += 1
            verdict = "DIFFER"
            print(f"DIFFER {name}")
            print("\n".join(diffs))
        elif notes:
            documented_n += 1
            verdict = "documented"
            print(f"documented  {name}  ({'; '.join(sorted(set(notes)))})")
        else:
            agree += 1
            verdict = "agree"
            print(f"agree  {name}  ({summary[:150]})")
        rows.append((name, verdict, summary, diffs))
        dump.append({"scenario": name, "apiserver": outcome["apiserver"], "nodeportd": outcome["nodeportd"]})
    print(f"\n{agree} agree, {documented_n} differ as documented in docs/extensions.md, {differ} differ ({a.setup})")
    if a.markdown:
        with open(a.markdown, "a") as f:
            for name, verdict, summary, _ in rows:
                s = summary.replace("|", "\\|").replace("\n", " ")
                f.write(f"| {a.setup} | {name} | {verdict} | {s} |\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dump, f, indent=1, default=str)
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
