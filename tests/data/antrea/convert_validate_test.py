#!/usr/bin/env python3
"""Turns the case tables of Antrea's pkg/controller/networkpolicy/validate_test.go
into tests/data/antrea/webhook-cases.json: one entry per case with the object as
the API server would store it (JSON names; `priority: 1` and `action: Allow`
added where the test leaves out these fields the schema requires), the group the test pre-creates, and
Antrea's verdict (expected reason, "" = admitted).

Usage: git -C <antrea> show HEAD:pkg/controller/networkpolicy/validate_test.go \
         | python3 convert_validate_test.py > webhook-cases.json
"""
import json
import re
import sys

TOKEN = re.compile(r'\s*(?:(//[^\n]*)|("(?:[^"\\]|\\.)*")|(`[^`]*`)|([A-Za-z_][A-Za-z0-9_.]*)|(-?\d+(?:\.\d+)?)|(\[\])|(.))', re.S)

def tokens(text):
    pos = 0
    out = []
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        comment, string, raw, ident, number, slice_, other = m.groups()
        if comment:
            continue
        if string:
            out.append(('str', json.loads(string)))
        elif raw:
            out.append(('str', raw[1:-1]))
        elif ident:
            out.append(('id', ident))
        elif number:
            out.append(('num', float(number) if '.' in number else int(number)))
        elif slice_:
            out.append(('op', '[]'))
        elif other and not other.isspace():
            out.append(('op', other))
    return out

VARIABLES = {
    'allowAction': 'Allow', 'dropAction': 'Drop', 'passAction': 'Pass',
    'crdv1beta1.RuleActionAllow': 'Allow', 'crdv1beta1.RuleActionDrop': 'Drop',
    'crdv1beta1.RuleActionPass': 'Pass', 'crdv1beta1.RuleActionReject': 'Reject',
    'query': 17, 'report': 18, 'crdv1beta1.IGMPQuery': 17, 'crdv1beta1.IGMPReportV1': 18,
    'portNum80': 80, 'int80': 80, 'int81': 81, 'int32For1999': 1999,
    'int32For32220': 32220, 'int32For32230': 32230, 'icmpType8': 8, 'icmpCode0': 0,
    'strHTTP': 'http', 'k8sProtocolUDP': 'UDP', 'k8sProtocolTCP': 'TCP',
    'corev1.ProtocolTCP': 'TCP', 'corev1.ProtocolUDP': 'UDP', 'corev1.ProtocolSCTP': 'SCTP',
    'v1.ProtocolTCP': 'TCP', 'v1.ProtocolUDP': 'UDP', 'v1.ProtocolSCTP': 'SCTP',
    'true': True, 'false': False, 'nil': None,
    'admv1.Create': 'CREATE', 'admv1.Update': 'UPDATE', 'admv1.Delete': 'DELETE',
    'features.L7NetworkPolicy': 'L7NetworkPolicy',
    'crdv1beta1.NamespaceMatchSelf': 'Self',
}

NAMES = {
    'CIDR': 'cidr', 'FQDN': 'fqdn', 'IPBlock': 'ipBlock', 'IPBlocks': 'ipBlocks',
    'ICMP': 'icmp', 'IGMP': 'igmp', 'HTTP': 'http', 'TLS': 'tls', 'SNI': 'sni',
    'ICMPType': 'icmpType', 'ICMPCode': 'icmpCode', 'IGMPType': 'igmpType',
    'L7Protocols': 'l7Protocols', 'ObjectMeta': 'metadata',
}

def json_name(go):
    return NAMES.get(go, go[0].lower() + go[1:])

class Parser:
    def __init__(self, toks):
        self.t = toks
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k] if self.i + k < len(self.t) else ('eof', None)

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, value):
        tok = self.next()
        if tok[1] != value:
            raise ValueError(f'expected {value!r}, got {tok!r} at {self.i}')

    def type_expr(self):
        """Skips a type: []T, map[K]V, pkg.T, struct{...}."""
        kind, value = self.peek()
        if value == '[]':
            self.next()
            return ('list', self.type_expr())
        if value == 'map':
            self.next(); self.expect('['); self.type_expr(); self.expect(']'); self.type_expr()
            return ('map',)
        if value == '*':
            self.next()
            return self.type_expr()
        if kind == 'id':
            self.next()
            return ('named', value)
        raise ValueError(f'type at {self.peek()}')

    def value(self):
        kind, value = self.peek()
        if value == '&':
            self.next()
            return self.value()
        if value == '{':
            return self.composite(None)
        if kind == 'str' or kind == 'num':
            self.next()
            while self.peek()[1] == '+':  # string concatenation
                self.next()
                value += self.next()[1]
            return value
        if value in ('[]', 'map'):
            t = self.type_expr()
            return self.composite(t)
        if kind == 'id':
            if self.peek(1)[1] == '{' and value not in VARIABLES:
                self.next()
                return self.composite(('named', value))
            if self.peek(1)[1] == '(':
                self.next(); self.next()
                args = []
                while self.peek()[1] != ')':
                    args.append(self.value())
                    if self.peek()[1] == ',':
                        self.next()
                self.next()
                if value in ('int32', 'int', 'intstr.FromInt', 'intstr.FromString', 'ptr.To', 'string', 'int64'):
                    return args[0]
                if value == 'fmt.Sprintf':
                    fmt_, *rest = args
                    return fmt_ % tuple(rest)
                raise ValueError(f'call {value}')
            self.next()
            if value not in VARIABLES:
                raise ValueError(f'unknown identifier {value}')
            return VARIABLES[value]
        raise ValueError(f'value at {self.peek()}')

    def composite(self, t):
        self.expect('{')
        keyed = None
        items = []
        fields = {}
        while self.peek()[1] != '}':
            # Keyed element: ident ':' or string ':'
            k0, v0 = self.peek()
            if self.peek(1)[1] == ':' and k0 in ('id', 'str', 'num'):
                self.next(); self.next()
                keyed = True
                fields[v0] = self.value()
            else:
                items.append(self.value())
            if self.peek()[1] == ',':
                self.next()
        self.next()
        if keyed:
            return {'__type': t, **fields}
        return items

def jsonify(v, map_keys=False):
    if isinstance(v, dict):
        t = v.get('__type')
        is_map = t == ('map',)
        out = {}
        for k, val in v.items():
            if k == '__type':
                continue
            out[k if is_map else json_name(k)] = jsonify(val)
        return out
    if isinstance(v, list):
        return [jsonify(x) for x in v]
    return v

def cases(source, func, object_field, kind, api):
    start = source.index(f'func {func}(')
    body_start = source.index('}{', source.index('tests := []struct', start)) + 1
    parser = Parser(tokens(source[body_start:]))
    table = parser.composite(None)
    out = []
    for case in table:
        case = {k: v for k, v in case.items() if k != '__type'}
        obj = jsonify(case.get(object_field))
        if not obj:
            continue
        meta = obj.setdefault('metadata', {})
        meta.setdefault('name', case['name'])  # the API server requires one
        obj = {'apiVersion': api, 'kind': kind, **obj}
        if kind in ('ClusterNetworkPolicy', 'NetworkPolicy'):
            # The webhook tests skip the schema's required fields.
            spec = obj.setdefault('spec', {})
            spec.setdefault('priority', 1)
            for direction in ('ingress', 'egress'):
                for rule in spec.get(direction, []):
                    rule.setdefault('action', 'Allow')
        exist = jsonify(case.get('existGroup')) if case.get('existGroup') else None
        if exist:
            exist = {'apiVersion': api, 'kind': kind, **exist}
        out.append({
            'test': func,
            'name': case['name'],
            'operation': case.get('operation', 'CREATE'),
            'featureGates': jsonify(case.get('featureGates')) if case.get('featureGates') else {},
            'object': obj,
            'exist': exist,
            'reason': case.get('expectedReason', ''),
        })
    return out

def main():
    source = sys.stdin.read()
    all_cases = []
    all_cases += cases(source, 'TestValidateAntreaClusterNetworkPolicy', 'policy', 'ClusterNetworkPolicy', 'crd.antrea.io/v1beta1')
    all_cases += cases(source, 'TestValidateAntreaNetworkPolicy', 'policy', 'NetworkPolicy', 'crd.antrea.io/v1beta1')
    all_cases += cases(source, 'TestValidateAntreaClusterGroup', 'curCG', 'ClusterGroup', 'crd.antrea.io/v1beta1')
    all_cases += cases(source, 'TestValidateAntreaGroup', 'curGroup', 'Group', 'crd.antrea.io/v1beta1')
    json.dump(all_cases, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write('\n')

main()
