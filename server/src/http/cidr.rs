//! Blocks of IP addresses, `ADDRESS/PREFIX`, as `--trusted-proxy` takes
//! them (SPEC A3b): parsed strictly, each refusal naming what is wrong.

use std::net::IpAddr;
use std::str::FromStr;

/// A block of addresses, `ADDRESS/PREFIX` (`10.0.0.0/8`, `fd00::/8`); a
/// bare address is the block of that address alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a text is not a [`Cidr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IP address.
    #[error("{0:?} is not an IP address")]
    Address(String),
    /// The part after `/` is not a number of bits the address has.
    #[error("{prefix:?} is not a prefix length from 0 to {bits}")]
    Prefix {
        /// What was given.
        prefix: String,
        /// The address's length in bits.
        bits: u8,
    },
    /// The address has bits set past its prefix (a typo, most likely).
    #[error("{given} has bits set past its prefix; the block is {network}")]
    HostBits {
        /// What was given.
        given: String,
        /// The block it falls in.
        network: Cidr,
    },
}

impl Cidr {
    /// Whether `address` lies in this block. An IPv4 address written as
    /// IPv6 (`::ffff:a.b.c.d`) is the IPv4 one, and lies in an IPv6 block
    /// where its mapped form does.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                u32::from(address) & mask_v4(self.prefix) == u32::from(network)
            }
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
            (IpAddr::V6(network), IpAddr::V4(address)) => {
                u128::from(address.to_ipv6_mapped()) & mask_v6(self.prefix) == u128::from(network)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                u128::from(address) & mask_v6(self.prefix) == u128::from(network)
            }
        }
    }
}

/// The first `prefix` bits set, of 32.
fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// The first `prefix` bits set, of 128.
fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address =
            IpAddr::from_str(address).map_err(|_| CidrError::Address(address.to_owned()))?;
        let bits = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix = match prefix {
            None => bits,
            Some(given) => given
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= bits && given.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| CidrError::Prefix {
                    prefix: given.to_owned(),
                    bits,
                })?,
        };
        let network = match address {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & mask_v4(prefix)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & mask_v6(prefix)).into()),
        };
        let cidr = Cidr { network, prefix };
        if network != address {
            return Err(CidrError::HostBits {
                given: text.to_owned(),
                network: cidr,
            });
        }
        Ok(cidr)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Test inputs written as text.
#[cfg(test)]
pub(super) mod written {
    use super::Cidr;
    use std::net::IpAddr;

    /// The block `text` names.
    pub fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    /// The address `text` names.
    pub fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::written::{cidr, ip};
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn cidrs_parse_as_written_and_a_bare_address_is_a_block_of_one() {
        assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr(" 127.0.0.1/32 ").to_string(), "127.0.0.1/32");
        assert_eq!(cidr("192.0.2.7").to_string(), "192.0.2.7/32");
        assert_eq!(cidr("fd00::/8").to_string(), "fd00::/8");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("::/0").to_string(), "::/0");
        assert_eq!(
            cidr("::ffff:10.1.0.0/112").to_string(),
            "::ffff:10.1.0.0/112"
        );
    }

    #[test]
    fn malformed_cidrs_are_refused_naming_what_is_wrong() {
        let refusals: Vec<String> = [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/eight",
            "10.0.0/8",
            "localhost",
            "",
            "10.0.0.1/8",
        ]
        .iter()
        .map(|text| text.parse::<Cidr>().unwrap_err().to_string())
        .collect();
        assert_eq!(
            refusals,
            [
                "\"33\" is not a prefix length from 0 to 32",
                "\"129\" is not a prefix length from 0 to 128",
                "\"\" is not a prefix length from 0 to 32",
                "\"+8\" is not a prefix length from 0 to 32",
                "\"eight\" is not a prefix length from 0 to 32",
                "\"10.0.0\" is not an IP address",
                "\"localhost\" is not an IP address",
                "\"\" is not an IP address",
                "10.0.0.1/8 has bits set past its prefix; the block is 10.0.0.0/8",
            ]
        );
    }

    #[test]
    fn a_block_holds_exactly_the_addresses_under_its_prefix() {
        let block = cidr("10.1.0.0/16");
        assert!(block.contains(ip("10.1.0.0")));
        assert!(block.contains(ip("10.1.255.255")));
        assert!(block.contains(ip("::ffff:10.1.2.3")));
        assert!(!block.contains(ip("10.2.0.0")));
        assert!(!block.contains(ip("10.0.255.255")));
        assert!(!block.contains(ip("::1")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(cidr("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!cidr("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(cidr("::/0").contains(ip("2001:db9::1")));
        assert!(cidr("::ffff:10.1.0.0/112").contains(ip("10.1.2.3")));
        assert!(!cidr("::ffff:10.1.0.0/112").contains(ip("10.2.0.0")));
        assert!(cidr("127.0.0.1/32").contains(ip("127.0.0.1")));
        assert!(!cidr("127.0.0.1/32").contains(ip("127.0.0.2")));
    }
}
