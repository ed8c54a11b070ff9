/// App Store storefronts are ISO 3166-1 alpha-3 country codes (`USA`); RevenueCat's
/// `country_code` is the alpha-2 code (`US`). The table is ISO 3166-1 (each entry the alpha-3
/// code followed by the alpha-2 code), plus `XKS`, the code Apple uses for Kosovo.
public enum Storefront {
    static let alpha2ByAlpha3: [String: String] = {
        let table = """
            ABWAW AFGAF AGOAO AIAAI ALAAX ALBAL ANDAD AREAE ARGAR ARMAM ASMAS ATAAQ ATFTF ATGAG AUSAU AUTAT AZEAZ BDIBI BELBE BENBJ
            BESBQ BFABF BGDBD BGRBG BHRBH BHSBS BIHBA BLMBL BLRBY BLZBZ BMUBM BOLBO BRABR BRBBB BRNBN BTNBT BVTBV BWABW CAFCF CANCA
            CCKCC CHECH CHLCL CHNCN CIVCI CMRCM CODCD COGCG COKCK COLCO COMKM CPVCV CRICR CUBCU CUWCW CXRCX CYMKY CYPCY CZECZ DEUDE
            DJIDJ DMADM DNKDK DOMDO DZADZ ECUEC EGYEG ERIER ESHEH ESPES ESTEE ETHET FINFI FJIFJ FLKFK FRAFR FROFO FSMFM GABGA GBRGB
            GEOGE GGYGG GHAGH GIBGI GINGN GLPGP GMBGM GNBGW GNQGQ GRCGR GRDGD GRLGL GTMGT GUFGF GUMGU GUYGY HKGHK HMDHM HNDHN HRVHR
            HTIHT HUNHU IDNID IMNIM INDIN IOTIO IRLIE IRNIR IRQIQ ISLIS ISRIL ITAIT JAMJM JEYJE JORJO JPNJP KAZKZ KENKE KGZKG KHMKH
            KIRKI KNAKN KORKR KWTKW LAOLA LBNLB LBRLR LBYLY LCALC LIELI LKALK LSOLS LTULT LUXLU LVALV MACMO MAFMF MARMA MCOMC MDAMD
            MDGMG MDVMV MEXMX MHLMH MKDMK MLIML MLTMT MMRMM MNEME MNGMN MNPMP MOZMZ MRTMR MSRMS MTQMQ MUSMU MWIMW MYSMY MYTYT NAMNA
            NCLNC NERNE NFKNF NGANG NICNI NIUNU NLDNL NORNO NPLNP NRUNR NZLNZ OMNOM PAKPK PANPA PCNPN PERPE PHLPH PLWPW PNGPG POLPL
            PRIPR PRKKP PRTPT PRYPY PSEPS PYFPF QATQA REURE ROURO RUSRU RWARW SAUSA SDNSD SENSN SGPSG SGSGS SHNSH SJMSJ SLBSB SLESL
            SLVSV SMRSM SOMSO SPMPM SRBRS SSDSS STPST SURSR SVKSK SVNSI SWESE SWZSZ SXMSX SYCSC SYRSY TCATC TCDTD TGOTG THATH TJKTJ
            TKLTK TKMTM TLSTL TONTO TTOTT TUNTN TURTR TUVTV TWNTW TZATZ UGAUG UKRUA UMIUM URYUY USAUS UZBUZ VATVA VCTVC VENVE VGBVG
            VIRVI VNMVN VUTVU WLFWF WSMWS XKSXK YEMYE ZAFZA ZMBZM ZWEZW
            """
        var codes: [String: String] = [:]
        for entry in table.split(whereSeparator: \.isWhitespace) where entry.count == 5 {
            codes[String(entry.prefix(3))] = String(entry.suffix(2))
        }
        return codes
    }()

    static let alpha2Codes = Set(alpha2ByAlpha3.values)

    /// The alpha-2 country code of a storefront (an alpha-3 code as Apple writes it, or an alpha-2
    /// code as RevenueCat's export does); nil for one the table does not know.
    public static func countryCode(_ storefront: String?) -> String? {
        guard let code = storefront?.uppercased() else { return nil }
        return code.utf8.count == 2 ? (alpha2Codes.contains(code) ? code : nil) : alpha2ByAlpha3[code]
    }
}
