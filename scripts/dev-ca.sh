#!/usr/bin/env bash
# A development certificate authority and the certificates anvild's TLS and mutual TLS need:
#   dev-ca.sh OUT_DIR [SERVER_NAME...]
# writes ca.pem (trust this in clients: anvil --tls-ca), server.pem/server.key (anvild
# --tls-cert/--tls-key; valid for localhost, 127.0.0.1 and each SERVER_NAME), client.pem/
# client.key (anvil --tls-cert/--tls-key with anvild --tls-client-ca ca.pem). ECDSA P-256, 30
# days. Existing files are kept (the compose file runs this on every start). For development
# only: the CA key lies next to the certificates.
set -euo pipefail
out="$1"
shift
mkdir -p "${out}"
cd "${out}"
[[ -f ca.pem && -f server.pem && -f client.pem ]] && exit 0
umask 077
san="DNS:localhost,IP:127.0.0.1"
for name in "$@"; do san+=",DNS:${name}"; done
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2> /dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 30 -subj "/CN=anvil development CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
sign() {  # sign NAME CN EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days 30 \
    -extfile "$1.ext" 2> /dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server localhost "subjectAltName=${san}
extendedKeyUsage=serverAuth"
sign client anvil-client "extendedKeyUsage=clientAuth"
chmod 0644 ca.pem server.pem client.pem
echo "development CA and certificates in ${out}"
