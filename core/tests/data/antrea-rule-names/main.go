// Computes Antrea's generated rule names for the rules in inputs.json, the
// way Antrea's mutating webhook does (pkg/controller/networkpolicy/mutate.go:
// "<ingress|egress>-<lowercase action>-" + the first 7 hex digits of the
// SHA-1 of encoding/json's Marshal of the crd.antrea.io/v1beta1 Rule).
// The structs below repeat the json tags of Antrea's v1beta1 types, in their
// declaration order, which is what encoding/json follows.
//
// Run: go run main.go < inputs.json > expected.json
package main

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

type NamespacedName struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

type PeerNamespaces struct {
	Match      string   `json:"match,omitempty"`
	SameLabels []string `json:"sameLabels,omitempty"`
}

type NetworkPolicyPeer struct {
	IPBlock                *IPBlock        `json:"ipBlock,omitempty"`
	PodSelector            *LabelSelector  `json:"podSelector,omitempty"`
	NamespaceSelector      *LabelSelector  `json:"namespaceSelector,omitempty"`
	Namespaces             *PeerNamespaces `json:"namespaces,omitempty"`
	ExternalEntitySelector *LabelSelector  `json:"externalEntitySelector,omitempty"`
	Group                  string          `json:"group,omitempty"`
	FQDN                   string          `json:"fqdn,omitempty"`
	ServiceAccount         *NamespacedName `json:"serviceAccount,omitempty"`
	NodeSelector           *LabelSelector  `json:"nodeSelector,omitempty"`
	Scope                  string          `json:"scope,omitempty"`
}

type AppliedTo struct {
	PodSelector            *LabelSelector  `json:"podSelector,omitempty"`
	NamespaceSelector      *LabelSelector  `json:"namespaceSelector,omitempty"`
	ExternalEntitySelector *LabelSelector  `json:"externalEntitySelector,omitempty"`
	Group                  string          `json:"group,omitempty"`
	ServiceAccount         *NamespacedName `json:"serviceAccount,omitempty"`
	Service                *NamespacedName `json:"service,omitempty"`
	NodeSelector           *LabelSelector  `json:"nodeSelector,omitempty"`
}

// IntOrString is intstr.IntOrString: a number or a string, marshalled as it
// was read.
type IntOrString struct {
	isString bool
	intVal   int32
	strVal   string
}

func (p *IntOrString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		p.isString = true
		return json.Unmarshal(b, &p.strVal)
	}
	return json.Unmarshal(b, &p.intVal)
}

func (p IntOrString) MarshalJSON() ([]byte, error) {
	if p.isString {
		return json.Marshal(p.strVal)
	}
	return json.Marshal(p.intVal)
}

type NetworkPolicyPort struct {
	Protocol      *string      `json:"protocol,omitempty"`
	Port          *IntOrString `json:"port,omitempty"`
	EndPort       *int32       `json:"endPort,omitempty"`
	SourcePort    *int32       `json:"sourcePort,omitempty"`
	SourceEndPort *int32       `json:"sourceEndPort,omitempty"`
}

type ICMPProtocol struct {
	ICMPType *int32 `json:"icmpType,omitempty"`
	ICMPCode *int32 `json:"icmpCode,omitempty"`
}

type IGMPProtocol struct {
	IGMPType     *int32 `json:"igmpType,omitempty"`
	GroupAddress string `json:"groupAddress,omitempty"`
}

type NetworkPolicyProtocol struct {
	ICMP *ICMPProtocol `json:"icmp,omitempty"`
	IGMP *IGMPProtocol `json:"igmp,omitempty"`
}

type HTTPProtocol struct {
	Host   string `json:"host,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

type TLSProtocol struct {
	SNI string `json:"sni,omitempty"`
}

type L7Protocol struct {
	HTTP *HTTPProtocol `json:"http,omitempty"`
	TLS  *TLSProtocol  `json:"tls,omitempty"`
}

type PeerService struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Scope     string `json:"scope,omitempty"`
}

type Rule struct {
	Action        *string                 `json:"action"`
	Ports         []NetworkPolicyPort     `json:"ports,omitempty"`
	Protocols     []NetworkPolicyProtocol `json:"protocols,omitempty"`
	L7Protocols   []L7Protocol            `json:"l7Protocols,omitempty"`
	From          []NetworkPolicyPeer     `json:"from,omitempty"`
	To            []NetworkPolicyPeer     `json:"to,omitempty"`
	ToServices    []PeerService           `json:"toServices,omitempty"`
	Name          string                  `json:"name,omitempty"`
	EnableLogging bool                    `json:"enableLogging"`
	LogLabel      string                  `json:"logLabel,omitempty"`
	AppliedTo     []AppliedTo             `json:"appliedTo,omitempty"`
}

type Case struct {
	Direction string          `json:"direction"`
	Rule      json.RawMessage `json:"rule"`
	Expected  string          `json:"expected,omitempty"`
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := range cases {
		var r Rule
		if err := json.Unmarshal(cases[i].Rule, &r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, _ := json.Marshal(r)
		sum := sha1.Sum(b)
		cases[i].Expected = fmt.Sprintf("%s-%s-%s", cases[i].Direction,
			strings.ToLower(*r.Action), hex.EncodeToString(sum[:])[:7])
	}
	out, _ := json.MarshalIndent(cases, "", "  ")
	fmt.Println(string(out))
}
