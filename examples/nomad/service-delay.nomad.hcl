# A service job with a shutdown_delay that keeps writing to its volhost
# volume while it runs, including during the delay after `nomad job stop`:
# Nomad reports the allocation pending (desired stop) for the delay and the
# task still runs, so the Nomad bridge keeps its claim until the client
# reports it complete (hashicorp/nomad #24130, #25819).

variable "root_dir" {
  type    = string
  default = "/var/lib/volhost"
}

variable "plugin" {
  type    = string
  default = "gce-pd"
}

variable "volume" {
  type    = string
  default = "vol2"
}

variable "shutdown_delay" {
  type    = string
  default = "10s"
}

variable "cleanup" {
  description = "remove the heartbeat file when stopped (test drivers with a fake mounter, see batch-write.nomad.hcl)"
  type        = bool
  default     = false
}

variable "node" {
  description = "a regular expression the node's name must match"
  type        = string
  default     = ".*"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

job "volhost-service" {
  type        = "service"
  datacenters = var.datacenters

  group "app" {
    shutdown_delay = var.shutdown_delay

    constraint {
      attribute = "${node.unique.name}"
      operator  = "regexp"
      value     = "^${var.node}$"
    }

    meta {
      volhost_volume_data = "default/${var.volume}"
    }

    task "app" {
      driver       = "raw_exec"
      kill_timeout = "2s"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          target="${var.root_dir}/csi/${var.plugin}/per-alloc/$NOMAD_ALLOC_ID/default/${var.volume}"
          while [ ! -d "$target" ]; do sleep 0.1; done
          if ${var.cleanup}; then trap 'rm -f "$target/heartbeat"; exit 0' TERM INT; fi
          while true; do
            date +%s.%N > "$target/heartbeat"
            sleep 0.1
          done
        EOT
        ]
      }
    }
  }
}
