data_dir = "/var/lib/volhost"
region   = "eu"
acl { enabled = true }
server {
  enabled = true
  join    = ["10.0.0.1:4747"]
}
tls {
  http = true
  rpc  = true
  ca_file   = "/etc/volhost/ca.pem"
  cert_file = "/etc/volhost/server.pem"
  key_file  = "/etc/volhost/server-key.pem"
  verify_server_hostname = true
  verify_https_client    = true
}
